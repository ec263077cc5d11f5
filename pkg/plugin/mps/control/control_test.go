package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingRunner records the command lines it runs and answers out.
type recordingRunner struct {
	mu    sync.Mutex
	calls []string
	out   string
}

func (r *recordingRunner) Run(_ context.Context, argv, env []string, stdin string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s stdin=%q env=%s", strings.Join(argv, " "), stdin, strings.Join(env, " ")))
	return []byte(r.out), nil
}

// TestControlClientTransport: MPS v3 commands go as arguments after -p 3
// and quit is -q; legacy commands go on stdin; each has the driver's
// environment.
func TestControlClientTransport(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		protocol int
		want     []string
	}{
		{protocol: 3, want: []string{
			`mps-control -p 3 namespace list --server=tangram --format=csv stdin="" env=CUDA_MPS_PIPE_DIRECTORY=/p LD_LIBRARY_PATH=/d/lib`,
			`mps-control -p 3 server list --format=csv stdin="" env=CUDA_MPS_PIPE_DIRECTORY=/p LD_LIBRARY_PATH=/d/lib`,
			`mps-control -p 3 -q stdin="" env=CUDA_MPS_PIPE_DIRECTORY=/p LD_LIBRARY_PATH=/d/lib`,
		}},
		{protocol: 2, want: []string{
			`mps-control stdin="namespace list --server=tangram --format=csv\n" env=CUDA_MPS_PIPE_DIRECTORY=/p LD_LIBRARY_PATH=/d/lib`,
			`mps-control stdin="get_server_list\n" env=CUDA_MPS_PIPE_DIRECTORY=/p LD_LIBRARY_PATH=/d/lib`,
			`mps-control stdin="quit\n" env=CUDA_MPS_PIPE_DIRECTORY=/p LD_LIBRARY_PATH=/d/lib`,
		}},
	} {
		r := &recordingRunner{}
		c := Client{Runner: r, Binary: "mps-control", PipeDir: "/p", Protocol: tt.protocol, Env: []string{"LD_LIBRARY_PATH=/d/lib"}}
		_, _ = c.Command(ctx, []string{"namespace", "list", "--server=tangram", "--format=csv"})
		_ = c.Probe(ctx)
		_ = c.Quit(ctx)
		if !slices.Equal(r.calls, tt.want) {
			t.Errorf("protocol %d:\n%s\nwant:\n%s", tt.protocol, strings.Join(r.calls, "\n"), strings.Join(tt.want, "\n"))
		}
	}
	r := &recordingRunner{}
	_, _ = Binary(r, "mps-control", "/p", WithEnv("PATH=/d/bin"))(ctx, []string{"server", "list", "--format=csv"})
	if want := []string{`mps-control -p 3 server list --format=csv stdin="" env=CUDA_MPS_PIPE_DIRECTORY=/p PATH=/d/bin`}; !slices.Equal(r.calls, want) {
		t.Errorf("Binary ran %q, want %q", r.calls, want)
	}
}

// hangingRunner never answers until its context ends.
type hangingRunner struct{}

func (hangingRunner) Run(ctx context.Context, argv, _ []string, _ string) ([]byte, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("running %s: %w", argv[0], ctx.Err())
}

// TestControlDeadline: a control command that never answers fails at its
// deadline with an error naming the command.
func TestControlDeadline(t *testing.T) {
	ctl := Binary(hangingRunner{}, "mps-control", "/p", WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err := ctl(context.Background(), []string{"namespace", "set", "tangram_c", "--server=tangram", "--active-thread-percentage=10"})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), `"namespace set tangram_c --server=tangram --active-thread-percentage=10" got no answer within 50ms`) {
		t.Errorf("a hung command: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the deadline was not kept: %s", time.Since(start))
	}
}

func TestDaemonArgs(t *testing.T) {
	for _, tt := range []struct {
		protocol  int
		multiUser bool
		want      string
	}{
		{3, true, "-p 3 -m -f"},
		{3, false, "-p 3 -f"},
		{2, true, "-f -M"},
		{0, false, "-f"},
	} {
		if got := strings.Join(DaemonArgs(tt.protocol, tt.multiUser), " "); got != tt.want {
			t.Errorf("DaemonArgs(%d, %t) = %q, want %q", tt.protocol, tt.multiUser, got, tt.want)
		}
	}
}

package mps

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

func TestResolveMode(t *testing.T) {
	tests := []struct {
		flag   string
		v3     bool
		want   Mode
		badArg bool
	}{
		{flag: "auto", v3: true, want: ModeV3},
		{flag: "auto", v3: false, want: ModeClassic},
		{flag: "", want: ModeClassic},
		{flag: "v3", v3: false, want: ModeV3},
		{flag: "classic", v3: true, want: ModeClassic},
		{flag: "v4", badArg: true},
	}
	for _, tt := range tests {
		m, err := ParseMode(tt.flag)
		if tt.badArg {
			if err == nil || !strings.Contains(err.Error(), "want auto, v3 or classic") {
				t.Errorf("ParseMode(%q) = %v, want an error naming the values", tt.flag, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := ResolveMode(m, tt.v3); got != tt.want {
			t.Errorf("ResolveMode(%q, %t) = %q, want %q", tt.flag, tt.v3, got, tt.want)
		}
	}
}

func TestNamespaceName(t *testing.T) {
	for _, tt := range []struct{ uid, want string }{
		{"0b7c3a8e-1f2d-4e5a-9b6c-7d8e9f0a1b2c", "tangram_0b7c3a8e_1f2d_4e5a_9b6c_7d8e9f0a1b2c"},
		{"c1", "tangram_c1"},
	} {
		got := NamespaceName(tt.uid)
		if got != tt.want {
			t.Errorf("NamespaceName(%q) = %q, want %q", tt.uid, got, tt.want)
		}
		if err := ValidNamespaceName(got); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{"tangram-c1", "", strings.Repeat("a", 65), "A"} {
		if ValidNamespaceName(bad) == nil {
			t.Errorf("ValidNamespaceName(%q) accepted it", bad)
		}
	}
	for name, ours := range map[string]bool{"tangram_c1": true, "tangram-c1": true, "admin_ns": false, "default": false} {
		if ownNamespace(name) != ours {
			t.Errorf("ownNamespace(%q) = %t", name, !ours)
		}
	}
}

func TestNamespaceFor(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name   string
		shares []Share
		want   NamespaceSpec
	}{
		{name: "one share", shares: []Share{{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 30}},
			want: NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}},
		{name: "no compute asked: no cap", shares: []Share{{Card: "GPU-a", MemoryBytes: 20 * gib}},
			want: NamespaceSpec{Name: "tangram_c", PinnedMemoryLimit: "20480M"}},
		{name: "two cards: smallest cap, largest memory", shares: []Share{
			{Card: "GPU-a", MemoryBytes: 10 * gib, ThreadPercent: 50},
			{Card: "GPU-b", MemoryBytes: 20 * gib, ThreadPercent: 25},
			{Card: "GPU-c", MemoryBytes: gib}},
			want: NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 25, PinnedMemoryLimit: "20480M"}},
		{name: "memory rounds up to MiB", shares: []Share{{Card: "GPU-a", MemoryBytes: mib + 1}},
			want: NamespaceSpec{Name: "tangram_c", PinnedMemoryLimit: "2M"}},
		{name: "cap above 100 is the whole card", shares: []Share{{Card: "GPU-a", ThreadPercent: 150}},
			want: NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := namespaceFor("c", tt.shares); got != tt.want {
				t.Errorf("namespaceFor = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestV3Commands(t *testing.T) {
	spec := NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	tests := []struct {
		got  []string
		want string
	}{
		{v3ServerCreate("tangram", 0, []string{"GPU-a", "GPU-b"}), "server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b"},
		{v3ServerList(), "server list --format=csv"},
		{v3NamespaceCreate("tangram", "tangram_c"), "namespace create tangram_c --server=tangram"},
		{v3NamespaceSet("tangram", spec), "namespace set tangram_c --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M"},
		{v3NamespaceSet("tangram", NamespaceSpec{Name: "tangram_c"}), ""},
		{v3NamespaceList("tangram"), "namespace list --server=tangram --format=csv"},
		{v3NamespacePipeDir("tangram", "tangram_c"), "namespace get tangram_c tangram pipe_directory"},
		{v3ClientList("tangram"), "client list --server=tangram --format=csv,noheader"},
		{v3ClientTerminate("tangram", 42), "client terminate 42 --server=tangram"},
		{v3NamespaceDelete("tangram", "tangram_c", false), "namespace delete tangram_c --server=tangram"},
		{v3NamespaceDelete("tangram", "tangram_c", true), "namespace delete tangram_c --server=tangram --force"},
	}
	for _, tt := range tests {
		if got := strings.Join(tt.got, " "); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

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
		c := control.Client{Runner: r, Binary: "mps-control", PipeDir: "/p", Protocol: tt.protocol, Env: []string{"LD_LIBRARY_PATH=/d/lib"}}
		_, _ = c.Command(ctx, v3NamespaceList("tangram"))
		_ = c.Probe(ctx)
		_ = c.Quit(ctx)
		if !slices.Equal(r.calls, tt.want) {
			t.Errorf("protocol %d:\n%s\nwant:\n%s", tt.protocol, strings.Join(r.calls, "\n"), strings.Join(tt.want, "\n"))
		}
	}
	r := &recordingRunner{}
	_, _ = control.Binary(r, "mps-control", "/p", control.WithEnv("PATH=/d/bin"))(ctx, v3ServerList())
	if want := []string{`mps-control -p 3 server list --format=csv stdin="" env=CUDA_MPS_PIPE_DIRECTORY=/p PATH=/d/bin`}; !slices.Equal(r.calls, want) {
		t.Errorf("control.Binary ran %q, want %q", r.calls, want)
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
	ctl := control.Binary(hangingRunner{}, "mps-control", "/p", control.WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err := ctl(context.Background(), v3NamespaceSet("tangram", NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 10}))
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
		if got := strings.Join(control.DaemonArgs(tt.protocol, tt.multiUser), " "); got != tt.want {
			t.Errorf("control.DaemonArgs(%d, %t) = %q, want %q", tt.protocol, tt.multiUser, got, tt.want)
		}
	}
}

func TestParseMPSSize(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "20G", want: 20 << 30}, {in: "20480M", want: 20 << 30}, {in: "20GiB", want: 20 << 30}, {in: "20 GB", want: 20 << 30},
		{in: "1.5G", want: 3 << 29}, {in: "512k", want: 512 << 10}, {in: "1T", want: 1 << 40}, {in: "4096", want: 4096},
		{in: "", want: 0}, {in: "0", want: 0}, {in: "none", want: 0}, {in: "Unlimited", want: 0}, {in: "-", want: 0},
		{in: "lots", wantErr: true}, {in: "20X", wantErr: true}, {in: "G", wantErr: true},
	} {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d (error %t)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	for _, b := range []int64{20 << 30, 1536 << 20, 3 << 29, 1 << 40, 4097} {
		if got, err := ParseSize(standin.FormatSize(b)); err != nil || got != b {
			t.Errorf("%d -> %q -> %d, %v", b, standin.FormatSize(b), got, err)
		}
	}
}

func TestSameLimits(t *testing.T) {
	want := NamespaceSpec{Name: "n", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	for _, tt := range []struct {
		have NamespaceSpec
		same bool
	}{
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G"}, true},
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}, true},
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "21474836480"}, true},
		{NamespaceSpec{ActiveThreadPercentage: 40, PinnedMemoryLimit: "20G"}, false},
		{NamespaceSpec{ActiveThreadPercentage: 30, PinnedMemoryLimit: "10G"}, false},
		{NamespaceSpec{ActiveThreadPercentage: 30}, false},
	} {
		if got := sameLimits(want, tt.have); got != tt.same {
			t.Errorf("sameLimits(%+v, %+v) = %t", want, tt.have, got)
		}
	}
	// No cap asked: a namespace listed at 100% has none.
	if !sameLimits(NamespaceSpec{PinnedMemoryLimit: "1024M"}, NamespaceSpec{ActiveThreadPercentage: 100, PinnedMemoryLimit: "1G"}) {
		t.Error("no cap and 100% differ")
	}
	if !sameLimits(NamespaceSpec{}, NamespaceSpec{ActiveThreadPercentage: 100, PinnedMemoryLimit: "none"}) {
		t.Error("no limits and the listed defaults differ")
	}
}

func TestParseV3CSV(t *testing.T) {
	tests := []struct {
		name      string
		out       string
		server    string
		wantState ServerState
		wantReady bool
		wantNS    map[string]NamespaceSpec
		wantErr   string
	}{
		{name: "server Ready, columns in another order, device list quoted",
			out: "uid,status,name,pid,pipe-directory,allowed-devices\n0,Ready,tangram,4242,/p/tangram,\"GPU-a,GPU-b\"\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "Ready", PID: "4242"}, wantReady: true},
		{name: "status in another case", out: "name,status\ntangram,READY\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "READY"}, wantReady: true},
		{name: "no status column: the pid tells", out: "name,pid\ntangram,4242\n", server: "tangram",
			wantState: ServerState{Listed: true, PID: "4242"}, wantReady: true},
		{name: "starting", out: "name,pid,status\ntangram,0,Starting\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "Starting", PID: "0"}},
		{name: "a status word we do not know, but the server's pid", out: "name,pid,status\ntangram,4242,Running\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "Running", PID: "4242"}, wantReady: true},
		{name: "listed without status or pid", out: "name,uid\ntangram,0\n", server: "tangram",
			wantState: ServerState{Listed: true}},
		{name: "server not listed", out: "name,status\nother,Ready\n", server: "tangram"},
		{name: "no header", out: "", server: "tangram", wantErr: "no header line"},
		{name: "no name column", out: "status\nReady\n", server: "tangram", wantErr: `no "name" column`},
		{name: "short row", out: "name,status\ntangram\n", server: "tangram", wantErr: "has 1 fields, the header 2"},
		{name: "namespaces, hyphenated columns",
			out: "name,server,active-thread-percentage,pinned-memory-limit,client-priority,pipe-directory\ntangram_a,tangram,30.00,20G,,/p/tangram/tangram_a\nother,tangram,100.00,none,,/p/tangram/other\n",
			wantNS: map[string]NamespaceSpec{
				"tangram_a": {Name: "tangram_a", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G", PipeDirectory: "/p/tangram/tangram_a"},
				"other":     {Name: "other", ActiveThreadPercentage: 100, PinnedMemoryLimit: "none", PipeDirectory: "/p/tangram/other"},
			}},
		{name: "namespaces, underscored columns",
			out: "server,name,active_thread_percentage,pinned_memory_limit,pipe_directory\ntangram,tangram_a,30,20480M,/p/tangram/tangram_a\n",
			wantNS: map[string]NamespaceSpec{
				"tangram_a": {Name: "tangram_a", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M", PipeDirectory: "/p/tangram/tangram_a"},
			}},
		{name: "bad percentage", out: "name,active-thread-percentage\nx,lots\n", wantErr: "not a number"},
		{name: "bad size", out: "name,pinned_memory_limit\nx,lots\n", wantErr: "pinned-memory-limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.server != "" {
				var state ServerState
				state, err = serverState(tt.out, tt.server)
				if err == nil && (state != tt.wantState || state.Ready() != tt.wantReady) {
					t.Errorf("state %+v (ready %t), want %+v (ready %t)", state, state.Ready(), tt.wantState, tt.wantReady)
				}
			} else {
				var ns map[string]NamespaceSpec
				ns, err = parseNamespaces(tt.out)
				if err == nil && !reflect.DeepEqual(ns, tt.wantNS) {
					t.Errorf("namespaces %+v, want %+v", ns, tt.wantNS)
				}
			}
			if errString(err) == "" && tt.wantErr != "" || tt.wantErr == "" && err != nil ||
				tt.wantErr != "" && !strings.Contains(errString(err), tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseClientPIDs(t *testing.T) {
	out := "1234567,tangram,tangram_a\n42,tangram,tangram_b\n99,tangram,tangram_a\n"
	if got, err := parseClientPIDs(out, "tangram_a"); err != nil || !slices.Equal(got, []int{1234567, 99}) {
		t.Errorf("clients of tangram_a: %v, %v", got, err)
	}
	// Another column order: the namespace first.
	if got, err := parseClientPIDs("tangram_b, 7\n", "tangram_b"); err != nil || !slices.Equal(got, []int{7}) {
		t.Errorf("clients of tangram_b: %v, %v", got, err)
	}
	if got, err := parseClientPIDs("", "tangram_a"); err != nil || len(got) != 0 {
		t.Errorf("no clients: %v, %v", got, err)
	}
}

// newV3StandIn starts the stand-in control binary (a separate process) as
// an MPS v3 daemon, as the plugin does on a node.
func newV3StandIn(t *testing.T, root string, cards []string) *ProcessDaemon {
	t.Helper()
	d := NewProcessDaemon(ProcessDaemonConfig{Layout: Layout{Root: root}, Binary: standInBinary, VisibleDevices: cards, MultiUser: true, Protocol: 3,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ProbeInterval: 20 * time.Millisecond})
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

// TestV3NamespacesAgainstStandIn drives the strict stand-in, started by
// ProcessDaemon as on a node (-p 3 -m -f, stdin held open), with the plugin's
// v3 code: commands as arguments, valid names, readiness from Ready,
// numbers compared as numbers, clients terminated before a delete.
func TestV3NamespacesAgainstStandIn(t *testing.T) {
	root := shortRoot(t)
	layout := Layout{Root: root}
	ctx := context.Background()
	d := newV3StandIn(t, root, []string{"GPU-a", "GPU-b"})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// The server through the control binary as a client (what the plugin
	// runs on a node), the rest through the stand-in in this process: each
	// run of the binary is a fork of this test program, slow under the
	// race detector.
	v3 := NewV3Namespaces(d.Control, []string{"GPU-a", "GPU-b"})
	v3.PipeDir = layout.PipeDir()
	var notRunning *ServerNotRunningError
	if err := v3.CheckRunning(ctx); !errors.As(err, &notRunning) || !strings.Contains(err.Error(), `server "tangram" is not listed`) {
		t.Errorf("CheckRunning before the server exists: %v", err)
	}
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	v3 = NewV3Namespaces(standin.Control(layout.PipeDir()), []string{"GPU-a", "GPU-b"})
	v3.PipeDir = layout.PipeDir()
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v3.CheckRunning(ctx); err != nil {
		t.Fatal(err)
	}
	a := NamespaceSpec{Name: NamespaceName("a"), ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	b := NamespaceSpec{Name: NamespaceName("b"), ActiveThreadPercentage: 50}
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{a, b}); err != nil {
		t.Fatal(err)
	}
	ctl := standin.Control(layout.PipeDir())
	// Someone else's namespace is left alone; ours that no claim wants
	// goes, its client terminated first; a client on ours keeps it
	// unchanged (the daemon would refuse to set it).
	for _, cmd := range [][]string{
		{"namespace", "create", "admin_ns", "--server=tangram"},
		{"standin", "attach-client", a.Name, "--server=tangram", "--pid=1001"},
		{"standin", "attach-client", b.Name, "--server=tangram", "--pid=1002"},
	} {
		if _, err := ctl(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{a}); err != nil {
		t.Fatal(err)
	}
	have, err := v3.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]NamespaceSpec{
		a.Name:     {Name: a.Name, ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G", PipeDirectory: layout.NamespacePipeDir("tangram", "a")},
		"admin_ns": {Name: "admin_ns", ActiveThreadPercentage: 100, PinnedMemoryLimit: "none", PipeDirectory: filepath.Join(layout.PipeDir(), "tangram", "admin_ns")},
	}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("namespaces %+v, want %+v", have, want)
	}
	// A changed limit is set once the client is gone.
	if _, err := ctl(ctx, v3ClientTerminate("tangram", 1001)); err != nil {
		t.Fatal(err)
	}
	a.ActiveThreadPercentage = 40
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{a}); err != nil {
		t.Fatal(err)
	}
	// Delete with a client attached: terminated, then deleted.
	if _, err := ctl(ctx, []string{"standin", "attach-client", a.Name, "--server=tangram", "--pid=1003"}); err != nil {
		t.Fatal(err)
	}
	if err := v3.Delete(ctx, a.Name, have); err != nil {
		t.Fatal(err)
	}
	if err := v3.Delete(ctx, a.Name, map[string]NamespaceSpec{}); err != nil {
		t.Errorf("deleting an unlisted namespace: %v", err)
	}
	entries, err := standin.Log(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	for _, e := range entries {
		if e.Transport != "argv" || e.Rejected != "" {
			t.Errorf("control.log: %+v; want every command as arguments and accepted", e)
		}
		logged = append(logged, e.Command)
	}
	an, bn := a.Name, b.Name
	wantLog := []string{
		"server list --format=csv", // the readiness probe
		"server list --format=csv",
		"server list --format=csv",
		"server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b",
		"server list --format=csv",
		"server list --format=csv",
		"namespace list --server=tangram --format=csv",
		"namespace create " + an + " --server=tangram",
		"namespace set " + an + " --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M",
		"namespace get " + an + " tangram pipe_directory",
		"namespace create " + bn + " --server=tangram",
		"namespace set " + bn + " --server=tangram --active-thread-percentage=50",
		"namespace get " + bn + " tangram pipe_directory",
		"namespace create admin_ns --server=tangram",
		"standin attach-client " + an + " --server=tangram --pid=1001",
		"standin attach-client " + bn + " --server=tangram --pid=1002",
		"namespace list --server=tangram --format=csv",
		"client list --server=tangram --format=csv,noheader",
		"client terminate 1002 --server=tangram",
		"namespace delete " + bn + " --server=tangram",
		"namespace list --server=tangram --format=csv",
		"client terminate 1001 --server=tangram",
		"namespace list --server=tangram --format=csv",
		"namespace set " + an + " --server=tangram --active-thread-percentage=40 --pinned-memory-limit=20480M",
		"standin attach-client " + an + " --server=tangram --pid=1003",
		"client list --server=tangram --format=csv,noheader",
		"client terminate 1003 --server=tangram",
		"namespace delete " + an + " --server=tangram",
	}
	if !slices.Equal(logged, wantLog) {
		t.Errorf("control.log:\n%s\nwant:\n%s", strings.Join(logged, "\n"), strings.Join(wantLog, "\n"))
	}
}

// standInDaemon is a stand-in daemon run in the test process.
type standInDaemon struct{ pipe, logDir string }

// startStandIn runs standin.RunDaemon with cfg (its pipe and log
// directories filled in) until the test ends.
func startStandIn(t *testing.T, cfg standin.Config) standInDaemon {
	t.Helper()
	root := shortRoot(t)
	d := standInDaemon{pipe: filepath.Join(root, "pipe"), logDir: filepath.Join(root, "log")}
	if err := os.MkdirAll(d.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.PipeDir, cfg.LogDir = d.pipe, d.logDir
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- standin.RunDaemon(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	mpstest.WaitAnswering(t, func(ctx context.Context) error { return standin.Probe(ctx, d.pipe) })
	return d
}

// TestV3PipeDirMismatch: a namespace the daemon reaches elsewhere than the
// plugin mounts fails the share rather than leaving its client uncapped.
func TestV3PipeDirMismatch(t *testing.T) {
	ctx := context.Background()
	d := startStandIn(t, standin.Config{Protocol: 3, MultiUser: true})
	v3 := NewV3Namespaces(standin.Control(d.pipe), []string{"GPU-a"})
	v3.PipeDir = "/elsewhere"
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	err := v3.Ensure(ctx, NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 10}, map[string]NamespaceSpec{})
	checkError(t, err, "not /elsewhere/tangram/tangram_c where the plugin mounts it")
	err = v3.Ensure(ctx, NamespaceSpec{Name: "tangram-c"}, map[string]NamespaceSpec{})
	checkError(t, err, "not a valid MPS v3 namespace name")
}

// TestV3DeleteForced: when terminating a client is refused, the delete is
// forced.
func TestV3DeleteForced(t *testing.T) {
	ctx := context.Background()
	d := startStandIn(t, standin.Config{Protocol: 3, MultiUser: true})
	real := standin.Control(d.pipe)
	// A daemon whose client terminate fails.
	ctl := func(ctx context.Context, cmd []string) (string, error) {
		if len(cmd) > 1 && cmd[0] == "client" && cmd[1] == "terminate" {
			return "", errors.New("client terminate: not supported")
		}
		return real(ctx, cmd)
	}
	v3 := NewV3Namespaces(ctl, []string{"GPU-a"})
	if err := v3.EnsureServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syncNamespaces(ctx, v3, []NamespaceSpec{{Name: "tangram_c", ActiveThreadPercentage: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := real(ctx, []string{"standin", "attach-client", "tangram_c", "--server=tangram"}); err != nil {
		t.Fatal(err)
	}
	if err := syncNamespaces(ctx, v3, nil); err != nil {
		t.Fatal(err)
	}
	entries, err := standin.Log(d.logDir)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-2:]
	if last[0].Command != "namespace delete tangram_c --server=tangram" || last[0].Rejected == "" ||
		last[1].Command != "namespace delete tangram_c --server=tangram --force" || last[1].Rejected != "" {
		t.Errorf("control.log ends %+v, want a refused delete, then a forced one", last)
	}
}

// recordingMounter records the bounds it was asked for.
type recordingMounter struct {
	mu      sync.Mutex
	mounted map[string]int64
	fail    error
}

func (r *recordingMounter) Mount(dir string, size int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.mounted[dir] = size
	return nil
}

func (r *recordingMounter) Unmount(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.mounted, dir)
	return nil
}

// inProcessV3 is the stand-in v3 daemon run in the test process: the
// Manager tests start and adopt it many times, which the separate program
// (TestV3NamespacesAgainstStandIn) makes slow under the race detector.
type inProcessV3 struct {
	layout Layout
	mu     sync.Mutex
	done   chan error
}

func (d *inProcessV3) Ensure(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done != nil {
		return nil // started by us and supervised, as ProcessDaemon does
	}
	if err := standin.Probe(ctx, d.layout.PipeDir()); err == nil {
		return nil // running (adopted)
	}
	if err := d.layout.create(); err != nil {
		return err
	}
	done := make(chan error, 1)
	d.done = done
	go func() {
		done <- standin.RunDaemon(context.Background(), standin.Config{PipeDir: d.layout.PipeDir(), LogDir: d.layout.LogDir(), Protocol: 3, MultiUser: true})
	}()
	for range 500 {
		if err := standin.Probe(ctx, d.layout.PipeDir()); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("the stand-in did not answer")
}

func (d *inProcessV3) Stop(ctx context.Context) error {
	d.mu.Lock()
	d.done = nil
	d.mu.Unlock()
	quit := control.Client{Runner: standin.Runner{}, Binary: control.BinaryName, PipeDir: d.layout.PipeDir(), Protocol: 3}
	if err := quit.Quit(ctx); err != nil && !strings.Contains(err.Error(), "cannot find MPS control daemon") {
		return err
	}
	return nil
}

func (d *inProcessV3) Close() {}

func (d *inProcessV3) Control(ctx context.Context, command []string) (string, error) {
	return standin.Control(d.layout.PipeDir())(ctx, command)
}

func newInProcessV3(t *testing.T, root string) *inProcessV3 {
	d := &inProcessV3{layout: Layout{Root: root}}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

type controlDaemon interface {
	Daemon
	Control(ctx context.Context, command []string) (string, error)
}

func newV3Manager(t *testing.T, root string, d *inProcessV3, mounter ShmMounter) *Manager {
	t.Helper()
	cards := []string{"GPU-a", "GPU-b"}
	layout := Layout{Root: root}
	namespaces := NewV3Namespaces(d.Control, cards)
	namespaces.PipeDir = layout.PipeDir()
	m := NewManager(layout, d, &RecordingComputeModeSetter{}, cards,
		WithTiming(Timing{ReadyWait: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}),
		WithV3(namespaces, ClaimDirs{Layout: layout, Mounter: mounter, ShmSizeBytes: 64 << 20}))
	t.Cleanup(m.Close)
	return m
}

func namespacesOf(t *testing.T, d controlDaemon) map[string]NamespaceSpec {
	t.Helper()
	v3 := NewV3Namespaces(d.Control, nil)
	have, err := v3.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range have {
		spec.PipeDirectory = "" // as the plugin mounts it: checked at Ensure
		have[name] = spec
	}
	return have
}

// TestManagerV3 prepares and releases shares through the Manager against
// the stand-in: one server, a namespace per claim with its limits, a
// /dev/shm and pipe directory per claim, all gone at release.
func TestManagerV3(t *testing.T) {
	const gib = 1 << 30
	root := shortRoot(t)
	ctx := context.Background()
	d := newInProcessV3(t, root)
	mounter := &recordingMounter{mounted: map[string]int64{}}
	m := newV3Manager(t, root, d, mounter)
	layout := Layout{Root: root}

	claims := map[string][]Share{
		"c1": {{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 30}},
		"c2": {{Card: "GPU-a", MemoryBytes: 20 * gib, ThreadPercent: 20}},
		"c3": {{Card: "GPU-a", MemoryBytes: 20 * gib}, {Card: "GPU-b", MemoryBytes: 10 * gib, ThreadPercent: 50}},
	}
	for _, c := range slices.Sorted(maps.Keys(claims)) {
		if err := m.Acquire(ctx, c, claims[c]); err != nil {
			t.Fatalf("Acquire %s: %v", c, err)
		}
	}
	// Acquiring again changes nothing.
	if err := m.Acquire(ctx, "c1", claims["c1"]); err != nil {
		t.Fatal(err)
	}
	// As the daemon lists them: sizes in the largest exact unit.
	want := map[string]NamespaceSpec{
		"tangram_c1": {Name: "tangram_c1", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G"},
		"tangram_c2": {Name: "tangram_c2", ActiveThreadPercentage: 20, PinnedMemoryLimit: "20G"},
		"tangram_c3": {Name: "tangram_c3", ActiveThreadPercentage: 50, PinnedMemoryLimit: "20G"},
	}
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces %+v, want %+v", got, want)
	}
	cfg := m.ClientConfig("c1")
	wantCfg := ClientConfig{
		PipeDir: filepath.Join(root, "pipe", "tangram", "tangram_c1"),
		Mounts: []Mount{
			{HostPath: filepath.Join(root, "pipe", "tangram", "tangram_c1"), ContainerPath: filepath.Join(root, "pipe", "tangram", "tangram_c1")},
			{HostPath: filepath.Join(root, "claims", "c1", "shm"), ContainerPath: "/dev/shm"},
		},
	}
	if !reflect.DeepEqual(cfg, wantCfg) {
		t.Errorf("ClientConfig(c1) = %+v, want %+v", cfg, wantCfg)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		fi, err := os.Stat(layout.ClaimShmDir(c))
		if err != nil || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0 {
			t.Errorf("/dev/shm of %s: %v, %v; want a sticky world-writable directory", c, fi, err)
		}
		if mounter.mounted[layout.ClaimShmDir(c)] != 64<<20 {
			t.Errorf("/dev/shm of %s is not bounded to 64 MiB: %v", c, mounter.mounted)
		}
		if _, err := os.Stat(layout.NamespacePipeDir("tangram", c)); err != nil {
			t.Errorf("the namespace pipe directory of %s: %v", c, err)
		}
	}

	if err := m.Release(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	delete(want, "tangram_c2")
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing c2: namespaces %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "claims", "c2")); !os.IsNotExist(err) {
		t.Errorf("c2's directory is still there: %v", err)
	}
	if _, ok := mounter.mounted[layout.ClaimShmDir("c2")]; ok {
		t.Error("c2's /dev/shm is still mounted")
	}
	if err := m.Release(ctx, "c2"); err != nil {
		t.Errorf("releasing again: %v", err)
	}
	if err := m.Release(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	delete(want, "tangram_c1")
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("after releasing c1: namespaces %+v, want %+v", got, want)
	}
	// The last share gone, the worker stops the daemon: its log tells.
	if err := m.Release(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	logged, err := standin.Commands(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(logged, "namespace delete tangram_c3 --server=tangram") {
		t.Errorf("the last claim's namespace was not deleted:\n%s", strings.Join(logged, "\n"))
	}
	var creates int
	for _, l := range logged {
		if strings.HasPrefix(l, "server create") {
			creates++
		}
	}
	if creates != 1 {
		t.Errorf("%d server creates, want one server for the node:\n%s", creates, strings.Join(logged, "\n"))
	}
}

// TestManagerV3Failures: a bound that cannot be set or a server that is
// not running fails the share with nothing left behind; the server case
// is retryable.
func TestManagerV3Failures(t *testing.T) {
	ctx := context.Background()
	t.Run("shm bound fails", func(t *testing.T) {
		root := shortRoot(t)
		d := newInProcessV3(t, root)
		m := newV3Manager(t, root, d, &recordingMounter{fail: errors.New("permission denied")})
		err := m.Acquire(ctx, "c1", []Share{{Card: "GPU-a", MemoryBytes: 1 << 30}})
		if err == nil || !strings.Contains(err.Error(), "bounding the /dev/shm of claim c1: permission denied") {
			t.Errorf("Acquire: %v", err)
		}
		if len(m.Holders()) != 0 {
			t.Errorf("holders after a failed share: %v", m.Holders())
		}
		if _, err := os.Stat(filepath.Join(root, "claims", "c1")); !os.IsNotExist(err) {
			t.Errorf("the claim's directory is left: %v", err)
		}
	})
	t.Run("server not running", func(t *testing.T) {
		root := shortRoot(t)
		d := newInProcessV3(t, root)
		// A control daemon that lists the server as starting.
		ctl := func(ctx context.Context, cmd []string) (string, error) {
			if slices.Equal(cmd, v3ServerList()) {
				return "name,pid,status\ntangram,0,Starting\n", nil
			}
			return d.Control(ctx, cmd)
		}
		layout := Layout{Root: root}
		m := NewManager(layout, d, &RecordingComputeModeSetter{}, []string{"GPU-a"},
			WithTiming(Timing{ReadyWait: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}),
			WithV3(NewV3Namespaces(ctl, []string{"GPU-a"}), ClaimDirs{Layout: layout}))
		t.Cleanup(m.Close)
		err := m.Acquire(ctx, "c1", []Share{{Card: "GPU-a", MemoryBytes: 1 << 30}})
		var notReady *DaemonNotReadyError
		if !errors.As(err, &notReady) || !strings.Contains(err.Error(), `MPS v3 server "tangram" is Starting, not Ready`) {
			t.Errorf("Acquire: %v, want a retryable error naming the server's state", err)
		}
		if len(m.Holders()) != 0 {
			t.Errorf("holders after a failed share: %v", m.Holders())
		}
		// The server was never created: no namespace anywhere.
		out, err := d.Control(ctx, []string{"namespace", "list", "--format=csv"})
		if got, perr := parseNamespaces(out); err != nil || perr != nil || len(got) != 0 {
			t.Errorf("namespaces after a failed share: %+v (%v, %v)", got, err, perr)
		}
	})
}

// TestManagerV3Restart: a new plugin process adopts the running daemon,
// recreates the namespace of a prepared claim that is missing and deletes
// those of claims no longer prepared. It leaves the claims' /dev/shm
// directories alone: a claim without a share (a whole card) has one too,
// and the driver sweeps those of claims it holds no record of
// (pkg/plugin TestRecoverSweepsClaimDirs).
func TestManagerV3Restart(t *testing.T) {
	root := shortRoot(t)
	ctx := context.Background()
	d := newInProcessV3(t, root)
	first := newV3Manager(t, root, d, nil)
	shares := map[string][]Share{
		"kept":    {{Card: "GPU-a", MemoryBytes: 1 << 30, ThreadPercent: 30}},
		"dropped": {{Card: "GPU-b", MemoryBytes: 1 << 30, ThreadPercent: 40}},
	}
	for _, c := range []string{"kept", "dropped"} {
		if err := first.Acquire(ctx, c, shares[c]); err != nil {
			t.Fatal(err)
		}
	}
	// The plugin exits (the daemon keeps running); the kept claim's
	// namespace is lost meanwhile.
	first.Close()
	if _, err := d.Control(ctx, v3NamespaceDelete("tangram", NamespaceName("kept"), false)); err != nil {
		log, _ := os.ReadFile(filepath.Join(root, "log", "control.log"))
		t.Fatalf("%v; control.log:\n%s", err, log)
	}

	next := newV3Manager(t, root, newInProcessV3(t, root), nil)
	next.Restore(ctx, "kept", shares["kept"])
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, next)
	want := map[string]NamespaceSpec{"tangram_kept": {Name: "tangram_kept", ActiveThreadPercentage: 30, PinnedMemoryLimit: "1G"}}
	if got := namespacesOf(t, d); !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces after restart %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "claims", "dropped")); err != nil {
		t.Errorf("the Manager removed a claim's directory, which is the driver's to sweep: %v", err)
	}
	if _, err := os.Stat(Layout{Root: root}.ClaimShmDir("kept")); err != nil {
		t.Errorf("the kept claim's /dev/shm: %v", err)
	}
}

func TestClaimDirsRefuseOddNames(t *testing.T) {
	dirs := ClaimDirs{Layout: Layout{Root: t.TempDir()}}
	for _, uid := range []string{"..", "a/b", "", "UPPER"} {
		if err := dirs.Create(context.Background(), uid); err == nil {
			t.Errorf("Create(%q) succeeded", uid)
		}
	}
}

// TestClassicShmClearedWhenDaemonStops: classic MPS shares one /dev/shm
// between every share of the node; once the last share is gone and the
// daemon stopped, what its clients left there is removed.
func TestClassicShmClearedWhenDaemonStops(t *testing.T) {
	root := t.TempDir()
	layout := Layout{Root: root}
	if err := layout.create(); err != nil {
		t.Fatal(err)
	}
	m := NewManager(layout, &countingDaemon{}, &RecordingComputeModeSetter{}, []string{"GPU-a"},
		WithTiming(Timing{ReadyWait: 5 * time.Second, Linger: time.Millisecond, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond}))
	t.Cleanup(m.Close)
	ctx := context.Background()
	if err := m.Acquire(ctx, "c1", cardShares("GPU-a")); err != nil {
		t.Fatal(err)
	}
	segment := filepath.Join(layout.ShmDir(), "cuda.shm.1234")
	if err := os.WriteFile(segment, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	if _, err := os.Stat(segment); err != nil {
		t.Fatalf("a segment of a running share was removed: %v", err)
	}
	if err := m.Release(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, m)
	if _, err := os.Stat(segment); !os.IsNotExist(err) {
		t.Errorf("the segment is left after the daemon stopped: %v", err)
	}
	if _, err := os.Stat(layout.ShmDir()); err != nil {
		t.Errorf("the shm directory itself must stay: %v", err)
	}
}

// syncNamespaces makes v's namespaces of ours exactly want: missing ones
// are created, changed ones set, and those of ours no claim wants deleted
// (also any named as earlier versions named them). Other namespaces are
// left alone.
func syncNamespaces(ctx context.Context, v *V3Namespaces, want []NamespaceSpec) error {
	have, err := v.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	wanted := map[string]bool{}
	for _, spec := range want {
		wanted[spec.Name] = true
		if err := v.Ensure(ctx, spec, have); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if wanted[name] || !ownNamespace(name) {
			continue
		}
		if err := v.Delete(ctx, name, have); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

package probe

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
)

// TestClientEnv: the client gets what a share's CDI spec gives its
// container, and the memory-limit hook exactly as the spec calls it.
func TestClientEnv(t *testing.T) {
	g := gpu.GPU{Index: 3, UUID: "GPU-11111111-2222-3333-4444-555555555555", MemoryBytes: 80 << 30}
	const pipe = "/work/mps-classic-1/pipe"
	for _, tc := range []struct {
		name     string
		hook     *cdi.MemoryLimitHook
		wantEnv  []string
		wantHook []string
	}{
		{
			name: "classic share",
			wantEnv: []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + g.UUID + "=2048M",
				"NVIDIA_VISIBLE_DEVICES=" + g.UUID, "CUDA_VISIBLE_DEVICES=" + g.UUID},
		},
		{
			name:     "with the memory-limit hook",
			hook:     &cdi.MemoryLimitHook{Path: "/bundle/tangram-cdi-hook", DriverRoot: "/usr/local/nvidia"},
			wantEnv:  []string{"CUDA_VISIBLE_DEVICES=" + g.UUID},
			wantHook: []string{"/bundle/tangram-cdi-hook", "--driver-root", "/usr/local/nvidia", "--limit", g.UUID + "=2147483648"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, hook, err := clientEnv(shareOf("claim-1", g, 2048<<20, pipe), g, pipe, tc.hook)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantEnv {
				if !slices.Contains(env, w) {
					t.Errorf("env lacks %q: %v", w, env)
				}
			}
			if !reflect.DeepEqual(hook, tc.wantHook) {
				t.Errorf("hook %q, want %q", hook, tc.wantHook)
			}
		})
	}
}

// TestMPSProcesses reads MPS daemons and servers from a proc tree and
// tells which name the check's directory in their environment.
func TestMPSProcesses(t *testing.T) {
	proc := t.TempDir()
	for pid, p := range map[string]struct{ comm, env string }{
		"10":   {"nvidia-cuda-mps\n", "CUDA_MPS_PIPE_DIRECTORY=/out/work/mps-classic-1/pipe\x00"},
		"11":   {"nvidia-cuda-mps\n", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps\x00"},
		"12":   {"bash\n", ""},
		"self": {"go\n", ""},
	} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(p.comm), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "environ"), []byte(p.env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &state{cfg: Config{ProcRoot: proc}}
	got := s.mpsProcesses()
	if want := map[int]string{10: "nvidia-cuda-mps", 11: "nvidia-cuda-mps"}; !reflect.DeepEqual(got, want) {
		t.Errorf("mpsProcesses = %v, want %v", got, want)
	}
	if !s.environMentions(10, "/out/work/mps-classic-1") || s.environMentions(11, "/out/work/mps-classic-1") {
		t.Error("environMentions picks the wrong daemon")
	}
}

// TestTwoUsersWithFakeClients runs the classic check's two-user step with
// stand-ins for cuda-alloc (prints a limited result, holds when told) and
// setpriv: a daemon that serves both at once passes, and the first client
// is ended as soon as the second has run; a second client held back until
// the first exits (what a single-user daemon does) fails with the reason.
func TestTwoUsersWithFakeClients(t *testing.T) {
	dir := t.TempDir()
	// The other user must traverse down to the pipe directory.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bin")
	root := filepath.Join(dir, "session")
	pipe := filepath.Join(root, "pipe")
	for _, d := range []string{bin, pipe} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	holding := filepath.Join(dir, "holding")
	write := func(name, body string) string {
		p := filepath.Join(bin, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The holder marks that it holds before it reports, so the second
	// client's stand-in sees the mark once the check starts it.
	alloc := write("cuda-alloc", `[ -n "$CUDA_ALLOC_HOLD_SECONDS" ] && touch `+holding+`
echo "cuda-alloc: devices=1 total_mib=143771 free_mib=143000 allocated_mib=1280 refused=1 error=2"
if [ -n "$CUDA_ALLOC_HOLD_SECONDS" ]; then sleep "$CUDA_ALLOC_HOLD_SECONDS"; rm -f `+holding+`; fi
`)
	multi := write("setpriv-multi", `shift 3; exec "$@"`+"\n")
	// A single-user daemon queues the other user until the first client
	// has gone.
	single := write("setpriv-single", `shift 3; while [ -e `+holding+` ]; do sleep 0.1; done; exec "$@"`+"\n")
	for _, tc := range []struct {
		name    string
		setpriv string
		hold    int
		pass    bool
		want    string
	}{
		{name: "multi-user", setpriv: multi, hold: 60, pass: true, want: "UID 65534 was served while a root client held the server"},
		{name: "single-user", setpriv: single, hold: 1, want: "one user at a time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(holding) // a killed holder leaves its mark
			s := &state{cfg: Config{CUDAAlloc: alloc}, holdSeconds: tc.hold}
			ms := &mpsSession{layout: daemon.Layout{Root: root}}
			tools := gpucheck.ClientTools{Setpriv: tc.setpriv, Root: true}
			o := s.twoUsers(context.Background(), func(string, ...any) {}, ms, tools, gpucheck.Decision{Reason: "no unshare"}, pipe, nil, 2048)
			if (o.Result == gpucheck.Passed) != tc.pass || !strings.Contains(o.Detail, tc.want) {
				t.Errorf("twoUsers = %+v, want passed=%v with %q", o, tc.pass, tc.want)
			}
		})
	}
}

package probe

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
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

package memlimit

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

const (
	uuidA = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	uuidB = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
	gib   = uint64(1) << 30
)

// setCall is one SetMemoryLimits_v1 the fake NVML saw.
type setCall struct {
	UUID, Cgroup string
	Soft, Hard   uint64
}

// fakeNVML serves the cards in uuids; fail makes setting a limit on that
// card answer the given return; it records every set and whether NVML was
// shut down after being initialised.
type fakeNVML struct {
	mock.Interface
	calls            []setCall
	inits, shutdowns int
}

func newFakeNVML(initRet nvml.Return, fail map[string]nvml.Return, uuids ...string) *fakeNVML {
	f := &fakeNVML{}
	f.InitFunc = func() nvml.Return { f.inits++; return initRet }
	f.ShutdownFunc = func() nvml.Return { f.shutdowns++; return nvml.SUCCESS }
	f.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, u := range uuids {
			if u == uuid {
				return &mock.Device{SetMemoryLimits_v1Func: func(ns string, soft, hard uint64) nvml.Return {
					f.calls = append(f.calls, setCall{uuid, ns, soft, hard})
					if ret, ok := fail[uuid]; ok {
						return ret
					}
					return nvml.SUCCESS
				}}, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return f
}

// host is a fake /proc and cgroup root: pid's cgroup file holds
// procCgroup, and dirs exist under the cgroup root.
func host(t *testing.T, pid int, procCgroup string, dirs ...string) (procRoot, cgroupRoot string) {
	t.Helper()
	root := t.TempDir()
	procRoot, cgroupRoot = filepath.Join(root, "proc"), filepath.Join(root, "sys", "fs", "cgroup")
	if procCgroup != "" {
		if err := os.MkdirAll(filepath.Join(procRoot, fmt.Sprint(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(procRoot, fmt.Sprint(pid), "cgroup"), []byte(procCgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(cgroupRoot, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return procRoot, cgroupRoot
}

const (
	podV2 = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abcd.scope"
	podV1 = "/kubepods/burstable/pod1234/abcd"
	// A hybrid host (this one): v1 controllers plus an unused unified "0::/".
	hybrid = "12:pids:" + podV1 + "\n4:memory:" + podV1 + "\n2:cpu,cpuacct:" + podV1 + "\n1:name=systemd:" + podV1 + "\n0::/\n"
	state  = `{"ociVersion":"1.2.0","id":"abcd","status":"creating","pid":4242,"bundle":"/run/containerd/abcd"}`
)

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		stdin      string
		procCgroup string   // empty: /proc/4242 does not exist
		dirs       []string // cgroup directories that exist
		initRet    nvml.Return
		fail       map[string]nvml.Return
		wantCalls  []string // <uuid> <cgroup under root> <soft> <hard>
		wantErr    string   // substring; "" = success
	}{
		{
			name:       "cgroup v2: one card",
			args:       []string{"--limit", uuidA + "=21474836480"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			wantCalls:  []string{uuidA + " " + podV2 + " 0 21474836480"},
		},
		{
			name:       "cgroup v2: two cards, each its own limit",
			args:       []string{"--limit", uuidA + "=21474836480", "--limit=" + uuidB + "=1073741824"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			wantCalls:  []string{uuidA + " " + podV2 + " 0 21474836480", uuidB + " " + podV2 + " 0 1073741824"},
		},
		{
			name:       "cgroup v1 / hybrid: the memory controller's cgroup",
			args:       []string{"--limit", uuidA + "=21474836480"},
			stdin:      state,
			procCgroup: hybrid,
			dirs:       []string{"memory" + podV1},
			wantCalls:  []string{uuidA + " /memory" + podV1 + " 0 21474836480"},
		},
		{
			name:    "no process",
			args:    []string{"--limit", uuidA + "=1"},
			stdin:   state,
			wantErr: "finding the cgroup of the container's process 4242",
		},
		{
			name:    "no pid in the state",
			args:    []string{"--limit", uuidA + "=1"},
			stdin:   `{"ociVersion":"1.2.0","id":"abcd","status":"creating"}`,
			wantErr: `container "abcd": the OCI state on stdin has no pid`,
		},
		{
			name:    "state is not JSON",
			args:    []string{"--limit", uuidA + "=1"},
			stdin:   "pid 4242",
			wantErr: "reading the container's OCI state from stdin",
		},
		{
			name:       "cgroup directory missing",
			args:       []string{"--limit", uuidA + "=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			wantErr:    "the cgroup of the container's process 4242",
		},
		{
			name:       "garbled /proc/<pid>/cgroup",
			args:       []string{"--limit", uuidA + "=1"},
			stdin:      state,
			procCgroup: "nonsense\n",
			dirs:       []string{podV2},
			wantErr:    `line "nonsense" is not <id>:<controllers>:<path>`,
		},
		{
			name:       "v1 without a memory controller",
			args:       []string{"--limit", uuidA + "=1"},
			stdin:      state,
			procCgroup: "3:pids:/x\n0::/\n",
			wantErr:    "names neither a cgroup v2 path nor a memory cgroup",
		},
		{
			name:       "NVML does not initialise",
			args:       []string{"--limit", uuidA + "=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			initRet:    nvml.ERROR_LIBRARY_NOT_FOUND,
			wantErr:    "initialising NVML to set memory limits on cgroup",
		},
		{
			name:       "unknown card",
			args:       []string{"--limit", "GPU-cccccccc-0000-0000-0000-000000000000=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			wantErr:    "card GPU-cccccccc-0000-0000-0000-000000000000: finding it in NVML: ERROR_NOT_FOUND (NVML return 6)",
		},
		{
			name:       "NVML refuses the second card: stops there",
			args:       []string{"--limit", uuidA + "=21474836480", "--limit", uuidB + "=1073741824"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			fail:       map[string]nvml.Return{uuidB: nvml.ERROR_NOT_SUPPORTED},
			wantCalls:  []string{uuidA + " " + podV2 + " 0 21474836480", uuidB + " " + podV2 + " 0 1073741824"},
			wantErr:    "card " + uuidB + ": setting a 1073741824-byte memory limit on cgroup",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procRoot, cgroupRoot := host(t, 4242, tt.procCgroup, tt.dirs...)
			cfg, err := ParseFlags(append(tt.args, "--proc-root", procRoot, "--cgroup-root", cgroupRoot))
			if err != nil {
				t.Fatal(err)
			}
			lib := newFakeNVML(tt.initRet, tt.fail, uuidA, uuidB)
			err = Run(cfg, strings.NewReader(tt.stdin), lib)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Run: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Run error %v, want one containing %q", err, tt.wantErr)
			}
			var got []string
			for _, c := range lib.calls {
				rel, _ := filepath.Rel(cgroupRoot, c.Cgroup)
				got = append(got, fmt.Sprintf("%s /%s %d %d", c.UUID, rel, c.Soft, c.Hard))
			}
			if !reflect.DeepEqual(got, tt.wantCalls) {
				t.Errorf("limits set:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.wantCalls, "\n"))
			}
			if lib.inits > 0 && lib.inits != lib.shutdowns && tt.initRet == nvml.SUCCESS {
				t.Errorf("NVML initialised %d times, shut down %d", lib.inits, lib.shutdowns)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []Limit
		wantErr string
	}{
		{"one", []string{"--limit", uuidA + "=20"}, []Limit{{uuidA, 20}}, ""},
		{"two", []string{"--limit", uuidA + "=20", "--limit", uuidB + "=30"}, []Limit{{uuidA, 20}, {uuidB, 30}}, ""},
		{"none", nil, nil, "no --limit"},
		{"no bytes", []string{"--limit", uuidA}, nil, "want <card UUID>=<bytes>"},
		{"zero bytes", []string{"--limit", uuidA + "=0"}, nil, "not a positive number of bytes"},
		{"quantity instead of bytes", []string{"--limit", uuidA + "=20Gi"}, nil, "not a positive number of bytes"},
		{"not a UUID", []string{"--limit", "gpu-0=20"}, nil, "is not a GPU UUID"},
		{"same card twice", []string{"--limit", uuidA + "=20", "--limit", uuidA + "=30"}, nil, "two --limit arguments"},
		{"stray argument", []string{"--limit", uuidA + "=20", "extra"}, nil, `unexpected "extra"`},
		{"unknown flag", []string{"--limits", uuidA + "=20"}, nil, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseFlags error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Limits, tt.want) {
				t.Errorf("limits %v, want %v", cfg.Limits, tt.want)
			}
			if cfg.ProcRoot != "/proc" || cfg.CgroupRoot != "/sys/fs/cgroup" || cfg.DriverRoot != "/" {
				t.Errorf("defaults %+v", cfg)
			}
			var strs []string
			for _, l := range cfg.Limits {
				strs = append(strs, "--limit", l.String())
			}
			if !reflect.DeepEqual(strs, tt.args) {
				t.Errorf("Limit.String round trip %v, want %v", strs, tt.args)
			}
		})
	}
}

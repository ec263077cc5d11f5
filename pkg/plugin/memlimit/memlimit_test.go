package memlimit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
)

const (
	uuidA  = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	uuidB  = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
	podUID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	claimX = "11111111-2222-3333-4444-555555555555"
	claimY = "66666666-7777-8888-9999-000000000000"
)

// fakeNVML serves the cards in uuids and keeps the limits set, by card and
// cgroup, as the driver does; fail makes setting a limit on that card
// answer the given return; symbols false leaves the memory limit calls out
// of the library. It records every set and whether NVML was shut down
// after being initialised.
type fakeNVML struct {
	mock.Interface
	mu               sync.Mutex // hooks of several containers run at once
	calls            []string   // "<uuid> <cgroup> <soft> <hard>"
	limits           map[string]uint64
	inits, shutdowns int
	// beforeSet, if set, runs before each set (outside mu): a hung call.
	beforeSet func(uuid, cgroup string)
}

func newFakeNVML(initRet nvml.Return, fail map[string]nvml.Return, symbols bool, uuids ...string) *fakeNVML {
	f := &fakeNVML{limits: map[string]uint64{}}
	f.InitFunc = func() nvml.Return { f.mu.Lock(); defer f.mu.Unlock(); f.inits++; return initRet }
	f.ShutdownFunc = func() nvml.Return { f.mu.Lock(); defer f.mu.Unlock(); f.shutdowns++; return nvml.SUCCESS }
	f.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
			if !symbols {
				return fmt.Errorf("undefined symbol: %s", s)
			}
			return nil
		}}
	}
	f.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, u := range uuids {
			if u != uuid {
				continue
			}
			return &mock.Device{
				SetMemoryLimits_v1Func: func(ns string, soft, hard uint64) nvml.Return {
					if f.beforeSet != nil {
						f.beforeSet(uuid, ns)
					}
					f.mu.Lock()
					defer f.mu.Unlock()
					f.calls = append(f.calls, fmt.Sprintf("%s %s %d %d", uuid, ns, soft, hard))
					if ret, ok := fail[uuid]; ok {
						return ret
					}
					f.limits[uuid+" "+ns] = hard
					return nvml.SUCCESS
				},
				GetMemoryLimits_v1Func: func(ns string) (nvml.MemoryLimits_v1, nvml.Return) {
					f.mu.Lock()
					defer f.mu.Unlock()
					hard, ok := f.limits[uuid+" "+ns]
					if !ok {
						return nvml.MemoryLimits_v1{}, nvml.ERROR_NOT_FOUND
					}
					return nvml.MemoryLimits_v1{NameSpace: ns, HardLimit: hard}, nvml.SUCCESS
				},
			}, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return f
}

// node is a fake host: /proc, the cgroup root and the records directory.
type node struct {
	proc, cgroups, state string
}

func newNode(t *testing.T) node {
	t.Helper()
	root := t.TempDir()
	return node{filepath.Join(root, "proc"), filepath.Join(root, "sys", "fs", "cgroup"), filepath.Join(root, "state", "memory-limits")}
}

// container makes a container's process pid with /proc/<pid>/cgroup
// holding procCgroup (nothing if empty) and cgroup directories dirs.
func (n node) container(t *testing.T, pid int, procCgroup string, dirs ...string) {
	t.Helper()
	if procCgroup != "" {
		mkdir(t, filepath.Join(n.proc, fmt.Sprint(pid)))
		if err := os.WriteFile(filepath.Join(n.proc, fmt.Sprint(pid), "cgroup"), []byte(procCgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		mkdir(t, filepath.Join(n.cgroups, d))
	}
}

// hook runs the hook for a container of process pid, for claim with limits.
func (n node) hook(t *testing.T, lib nvml.Interface, pid int, claim string, limits ...string) error {
	t.Helper()
	return n.hookWaiting(t, lib, DefaultLockWait, nil, pid, claim, limits...)
}

// hookWaiting is hook with the wait for each lock, and the warnings in warn.
func (n node) hookWaiting(t *testing.T, lib nvml.Interface, wait time.Duration, warn io.Writer, pid int, claim string, limits ...string) error {
	t.Helper()
	args := []string{"--proc-root", n.proc, "--cgroup-root", n.cgroups, "--state-dir", n.state, "--claim", claim, "--lock-wait", wait.String()}
	for _, l := range limits {
		args = append(args, "--limit", l)
	}
	cfg, err := ParseFlags(args)
	if err != nil {
		t.Error(err) // also from other goroutines
		return err
	}
	cfg.Warn = warn
	return Run(cfg, strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.2.0","id":"c%d","status":"creating","pid":%d}`, pid, pid)), lib)
}

// rel shows the calls with cgroup paths relative to the cgroup root.
func (n node) rel(calls []string) []string {
	var out []string
	for _, c := range calls {
		out = append(out, strings.Replace(c, n.cgroups, "", 1))
	}
	return out
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

const (
	systemdPodDir = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice"
	podV2         = systemdPodDir + "/cri-containerd-abcd.scope"
	cgroupfsPod   = "/kubepods/burstable/pod" + podUID
	podV1         = cgroupfsPod + "/abcd"
	// A hybrid host (this one): v1 controllers plus an unused unified "0::/".
	hybrid = "12:pids:" + podV1 + "\n4:memory:" + podV1 + "\n2:cpu,cpuacct:" + podV1 + "\n1:name=systemd:" + podV1 + "\n0::/\n"
	state  = `{"ociVersion":"1.2.0","id":"abcd","status":"creating","pid":4242,"bundle":"/run/containerd/abcd"}`
)

func TestFindPodCgroup(t *testing.T) {
	tests := []struct {
		name      string
		container string // under the cgroup root
		exists    bool   // the container's directories exist
		wantPod   string // "" = error
		wantUID   string
		wantErr   string
	}{
		{"systemd, burstable", podV2, true, systemdPodDir, podUID, ""},
		{"systemd, guaranteed", "/kubepods.slice/kubepods-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice/cri-containerd-1.scope", true,
			"/kubepods.slice/kubepods-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice", podUID, ""},
		{"systemd under the kubelet's --cgroup-root (kind)", "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" +
			strings.ReplaceAll(podUID, "-", "_") + ".slice/cri-containerd-1.scope", true,
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice", podUID, ""},
		{"systemd, the runtime's nested container cgroup", podV2 + "/container", true, systemdPodDir, podUID, ""},
		{"cgroupfs, burstable", podV1, true, cgroupfsPod, podUID, ""},
		{"cgroupfs, besteffort", "/kubepods/besteffort/pod" + podUID + "/ctr", true, "/kubepods/besteffort/pod" + podUID, podUID, ""},
		{"cgroupfs, guaranteed", "/kubepods/pod" + podUID + "/ctr", true, "/kubepods/pod" + podUID, podUID, ""},
		{"cgroupfs, v1 memory hierarchy", "/memory" + podV1, true, "/memory" + cgroupfsPod, podUID, ""},
		{"static pod (32 hex digits)", "/kubepods/burstable/pod0123456789abcdef0123456789abcdef/ctr", true,
			"/kubepods/burstable/pod0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef", ""},
		{"not in a pod: a system service", "/system.slice/containerd.service", true, "", "", "is not inside a kubelet pod cgroup"},
		{"the pod cgroup itself is no container", cgroupfsPod, true, "", "", "is not inside a kubelet pod cgroup"},
		{"a pod-like name outside kubepods", "/user.slice/pod" + podUID + "/ctr", true, "", "", "is not inside a kubelet pod cgroup"},
		{"the pod cgroup is gone", podV1, false, "", "", "the pod cgroup of container cgroup"},
		{"not a pod UID", "/kubepods/burstable/podXYZ/ctr", true, "", "", "is not inside a kubelet pod cgroup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.exists {
				mkdir(t, filepath.Join(root, tt.container))
			}
			got, err := FindPodCgroup(root, filepath.Join(root, tt.container))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FindPodCgroup = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := (PodCgroup{Dir: filepath.Join(root, tt.wantPod), PodUID: tt.wantUID}); got != want {
				t.Errorf("FindPodCgroup = %+v, want %+v", got, want)
			}
		})
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		limits     []string
		stdin      string
		procCgroup string   // empty: /proc/4242 does not exist
		dirs       []string // cgroup directories that exist
		initRet    nvml.Return
		noSymbols  bool
		fail       map[string]nvml.Return
		wantCalls  []string // <uuid> <cgroup under root> <soft> <hard>
		wantErr    string   // substring; "" = success
	}{
		{
			name:       "cgroup v2: one card, on the pod's cgroup",
			limits:     []string{uuidA + "=21474836480"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			wantCalls:  []string{uuidA + " " + systemdPodDir + " 0 21474836480"},
		},
		{
			name:       "cgroup v2: two cards, each its own limit",
			limits:     []string{uuidA + "=21474836480", uuidB + "=1073741824"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			wantCalls:  []string{uuidA + " " + systemdPodDir + " 0 21474836480", uuidB + " " + systemdPodDir + " 0 1073741824"},
		},
		{
			name:       "cgroup v1 / hybrid: the memory controller's pod cgroup",
			limits:     []string{uuidA + "=21474836480"},
			stdin:      state,
			procCgroup: hybrid,
			dirs:       []string{"memory" + podV1},
			wantCalls:  []string{uuidA + " /memory" + cgroupfsPod + " 0 21474836480"},
		},
		{
			name:       "a driver older than r615: no symbol, nothing called",
			limits:     []string{uuidA + "=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			noSymbols:  true,
			wantErr:    "a driver older than r615 has no per-cgroup memory limits",
		},
		{
			name:       "a container outside any pod cgroup",
			limits:     []string{uuidA + "=1"},
			stdin:      state,
			procCgroup: "0::/system.slice/foo.scope\n",
			dirs:       []string{"/system.slice/foo.scope"},
			wantErr:    "is not inside a kubelet pod cgroup",
		},
		{
			name:    "no process",
			limits:  []string{uuidA + "=1"},
			stdin:   state,
			wantErr: "finding the cgroup of the container's process 4242",
		},
		{
			name:    "no pid in the state",
			limits:  []string{uuidA + "=1"},
			stdin:   `{"ociVersion":"1.2.0","id":"abcd","status":"creating"}`,
			wantErr: `container "abcd": the OCI state on stdin has no pid`,
		},
		{
			name:    "state is not JSON",
			limits:  []string{uuidA + "=1"},
			stdin:   "pid 4242",
			wantErr: "reading the container's OCI state from stdin",
		},
		{
			name:       "cgroup directory missing",
			limits:     []string{uuidA + "=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			wantErr:    "the cgroup of the container's process 4242",
		},
		{
			name:       "garbled /proc/<pid>/cgroup",
			limits:     []string{uuidA + "=1"},
			stdin:      state,
			procCgroup: "nonsense\n",
			dirs:       []string{podV2},
			wantErr:    `line "nonsense" is not <id>:<controllers>:<path>`,
		},
		{
			name:       "v1 without a memory controller",
			limits:     []string{uuidA + "=1"},
			stdin:      state,
			procCgroup: "3:pids:/x\n0::/\n",
			wantErr:    "names neither a cgroup v2 path nor a memory cgroup",
		},
		{
			name:       "NVML does not initialise",
			limits:     []string{uuidA + "=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			initRet:    nvml.ERROR_LIBRARY_NOT_FOUND,
			wantErr:    "initialising NVML to set memory limits on pod cgroup",
		},
		{
			name:       "unknown card",
			limits:     []string{"GPU-cccccccc-0000-0000-0000-000000000000=1"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			wantErr:    "card GPU-cccccccc-0000-0000-0000-000000000000: finding it in NVML: ERROR_NOT_FOUND (NVML return 6)",
		},
		{
			name:       "NVML refuses the second card: stops there",
			limits:     []string{uuidA + "=21474836480", uuidB + "=1073741824"},
			stdin:      state,
			procCgroup: "0::" + podV2 + "\n",
			dirs:       []string{podV2},
			fail:       map[string]nvml.Return{uuidB: nvml.ERROR_NOT_FOUND},
			wantCalls:  []string{uuidA + " " + systemdPodDir + " 0 21474836480", uuidB + " " + systemdPodDir + " 0 1073741824"},
			wantErr:    "card " + uuidB + ": setting a 1073741824-byte memory limit on pod cgroup",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			n.container(t, 4242, tt.procCgroup, tt.dirs...)
			args := []string{"--proc-root", n.proc, "--cgroup-root", n.cgroups, "--state-dir", n.state, "--claim", claimX}
			for _, l := range tt.limits {
				args = append(args, "--limit", l)
			}
			cfg, err := ParseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			lib := newFakeNVML(tt.initRet, tt.fail, !tt.noSymbols, uuidA, uuidB)
			err = Run(cfg, strings.NewReader(tt.stdin), lib)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Run: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Run error %v, want one containing %q", err, tt.wantErr)
			}
			if got := n.rel(lib.calls); !reflect.DeepEqual(got, tt.wantCalls) {
				t.Errorf("limits set:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.wantCalls, "\n"))
			}
			if tt.noSymbols && !errors.Is(err, ErrNoMemoryLimits) {
				t.Errorf("error %v is not ErrNoMemoryLimits", err)
			}
			if lib.inits > 0 && lib.inits != lib.shutdowns && tt.initRet == nvml.SUCCESS {
				t.Errorf("NVML initialised %d times, shut down %d", lib.inits, lib.shutdowns)
			}
		})
	}
}

// TestOneLimitPerPod: the containers of one pod share the claim's limit on
// the pod's cgroup; it is set once, never per container nor summed over
// them, also when a container restarts.
func TestOneLimitPerPod(t *testing.T) {
	n := newNode(t)
	lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA)
	n.container(t, 1, "0::"+systemdPodDir+"/cri-containerd-c1.scope\n", systemdPodDir+"/cri-containerd-c1.scope")
	n.container(t, 2, "0::"+systemdPodDir+"/cri-containerd-c2.scope\n", systemdPodDir+"/cri-containerd-c2.scope")
	for _, pid := range []int{1, 2, 1} {
		if err := n.hook(t, lib, pid, claimX, uuidA+"=21474836480"); err != nil {
			t.Fatalf("container %d: %v", pid, err)
		}
	}
	if want := []string{uuidA + " " + systemdPodDir + " 0 21474836480"}; !reflect.DeepEqual(n.rel(lib.calls), want) {
		t.Errorf("limits set:\n%s\nwant one 20 GiB limit on the pod cgroup:\n%s", strings.Join(n.rel(lib.calls), "\n"), want[0])
	}
}

// TestClaimsOfOnePodAddUp: two claims of one pod with shares of one card
// share the pod's limit there, which is their sum.
func TestClaimsOfOnePodAddUp(t *testing.T) {
	n := newNode(t)
	lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA, uuidB)
	n.container(t, 1, "0::"+podV2+"\n", podV2)
	if err := n.hook(t, lib, 1, claimX, uuidA+"=10737418240"); err != nil {
		t.Fatal(err)
	}
	if err := n.hook(t, lib, 1, claimY, uuidA+"=5368709120", uuidB+"=1073741824"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		uuidA + " " + systemdPodDir + " 0 10737418240",
		uuidA + " " + systemdPodDir + " 0 16106127360",
		uuidB + " " + systemdPodDir + " 0 1073741824",
	}
	if got := n.rel(lib.calls); !reflect.DeepEqual(got, want) {
		t.Errorf("limits set:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSpecOfAnOlderPlugin: a hook without --claim (a kept CDI spec an
// older plugin wrote) still limits the pod once, without records.
func TestSpecOfAnOlderPlugin(t *testing.T) {
	n := newNode(t)
	lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA)
	n.container(t, 1, "0::"+systemdPodDir+"/cri-containerd-c1.scope\n", systemdPodDir+"/cri-containerd-c1.scope")
	n.container(t, 2, "0::"+systemdPodDir+"/cri-containerd-c2.scope\n", systemdPodDir+"/cri-containerd-c2.scope")
	for _, pid := range []int{1, 2} {
		cfg, err := ParseFlags([]string{"--proc-root", n.proc, "--cgroup-root", n.cgroups, "--limit", uuidA + "=21474836480"})
		if err != nil {
			t.Fatal(err)
		}
		if err := Run(cfg, strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.2.0","id":"c","status":"creating","pid":%d}`, pid)), lib); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{uuidA + " " + systemdPodDir + " 0 21474836480"}; !reflect.DeepEqual(n.rel(lib.calls), want) {
		t.Errorf("limits set %v, want %v", n.rel(lib.calls), want)
	}
	if _, err := os.Stat(n.state); !os.IsNotExist(err) {
		t.Errorf("records directory %s: %v, want none", n.state, err)
	}
}

// TestOnePodPerClaim: a second pod on a hard share claim is refused while
// the first pod's cgroup exists; once it is gone, the next pod takes the
// claim with its own limit.
func TestOnePodPerClaim(t *testing.T) {
	n := newNode(t)
	lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA)
	const otherUID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	first, second := cgroupfsPod, "/kubepods/besteffort/pod"+otherUID
	n.container(t, 1, "0::"+first+"/c1\n", first+"/c1")
	n.container(t, 2, "0::"+second+"/c2\n", second+"/c2")
	if err := n.hook(t, lib, 1, claimX, uuidA+"=21474836480"); err != nil {
		t.Fatal(err)
	}
	err := n.hook(t, lib, 2, claimX, uuidA+"=21474836480")
	want := "claim " + claimX + " is a hard memory share held by pod " + podUID
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pod "+otherUID+" cannot use it too") {
		t.Fatalf("second pod: %v, want a refusal containing %q", err, want)
	}
	if err := os.RemoveAll(filepath.Join(n.cgroups, first)); err != nil {
		t.Fatal(err)
	}
	if err := n.hook(t, lib, 2, claimX, uuidA+"=21474836480"); err != nil {
		t.Fatalf("second pod after the first is gone: %v", err)
	}
	wantCalls := []string{uuidA + " " + first + " 0 21474836480", uuidA + " " + second + " 0 21474836480"}
	if got := n.rel(lib.calls); !reflect.DeepEqual(got, wantCalls) {
		t.Errorf("limits set:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantCalls, "\n"))
	}
	rec, err := records.Dir{Path: n.state}.Load(claimX)
	if err != nil {
		t.Fatal(err)
	}
	if rec.PodUID != otherUID || rec.PodCgroup != filepath.Join(n.cgroups, second) {
		t.Errorf("record %+v, want the second pod's", rec)
	}
	if err := (records.Dir{Path: n.state}).Remove(claimX); err != nil {
		t.Fatal(err)
	}
	if rec, err := (records.Dir{Path: n.state}).Load(claimX); err != nil || rec.PodCgroup != "" {
		t.Errorf("record after Remove: %+v, %v", rec, err)
	}
}

func TestParseFlags(t *testing.T) {
	req := []string{"--claim", claimX, "--state-dir", "/var/lib/tangram/memory-limits"}
	tests := []struct {
		name    string
		args    []string
		want    []Limit
		wantErr string
	}{
		{"one", append([]string{"--limit", uuidA + "=20"}, req...), []Limit{{uuidA, 20}}, ""},
		{"two", append([]string{"--limit", uuidA + "=20", "--limit", uuidB + "=30"}, req...), []Limit{{uuidA, 20}, {uuidB, 30}}, ""},
		{"none", req, nil, "no --limit"},
		{"an older plugin's spec: no claim, no state dir", []string{"--limit", uuidA + "=20"}, []Limit{{uuidA, 20}}, ""},
		{"no claim", []string{"--limit", uuidA + "=20", "--state-dir", "/x"}, nil, "give --claim and --state-dir together"},
		{"no state dir", []string{"--limit", uuidA + "=20", "--claim", claimX}, nil, "give --claim and --state-dir together"},
		{"claim with a path", append([]string{"--limit", uuidA + "=20", "--claim", "../x"}, "--state-dir", "/x"), nil, "is not a claim UID"},
		{"no bytes", append([]string{"--limit", uuidA}, req...), nil, "want <card UUID>=<bytes>"},
		{"zero bytes", append([]string{"--limit", uuidA + "=0"}, req...), nil, "not a positive number of bytes"},
		{"quantity instead of bytes", append([]string{"--limit", uuidA + "=20Gi"}, req...), nil, "not a positive number of bytes"},
		{"not a UUID", append([]string{"--limit", "gpu-0=20"}, req...), nil, "is not a GPU UUID"},
		{"same card twice", append([]string{"--limit", uuidA + "=20", "--limit", uuidA + "=30"}, req...), nil, "two --limit arguments"},
		{"stray argument", append(append([]string{"--limit", uuidA + "=20"}, req...), "extra"), nil, `unexpected "extra"`},
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
			if cfg.ProcRoot != "/proc" || cfg.CgroupRoot != "/sys/fs/cgroup" || cfg.DriverRoot != "/" || (cfg.Claim != claimX && cfg.Claim != "") {
				t.Errorf("defaults %+v", cfg)
			}
			var strs []string
			for _, l := range cfg.Limits {
				strs = append(strs, "--limit", l.String())
			}
			if !reflect.DeepEqual(strs, tt.args[:len(strs)]) {
				t.Errorf("Limit.String round trip %v, want %v", strs, tt.args[:len(strs)])
			}
		})
	}
}

// TestRunNonRoot: on a strict share (--non-root-class) the hook checks
// every container that joins the claim, from its own runtime config,
// before anything is set: a root one is refused (a NonRootError naming
// the claim and the fix) with no limit set and no record of its pod, a
// locked-down one gets its limit. Without the flag (other classes) a root
// container is not checked.
func TestRunNonRoot(t *testing.T) {
	const (
		root     = `{"process":{"user":{"uid":0},"noNewPrivileges":true}}`
		nonRoot  = `{"process":{"user":{"uid":1000},"noNewPrivileges":true}}`
		strictCl = "hard-shared-gpu.tangram.dev"
	)
	tests := []struct {
		name     string
		class    string
		config   string // the bundle's config.json; "" writes none
		wantErr  []string
		wantCall bool
	}{
		{name: "root container on a strict share", class: strictCl, config: root,
			wantErr: []string{"container abcd would run as uid 0 (root) on a share of class " + strictCl + " (claim team/share)", "runAsNonRoot: true"}},
		{name: "unreadable config on a strict share", class: strictCl,
			wantErr: []string{"container abcd: reading its OCI runtime config", "refusing it"}},
		{name: "non-root container on a strict share", class: strictCl, config: nonRoot, wantCall: true},
		{name: "root container, class not strict", config: root, wantCall: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			n.container(t, 4242, "0::"+podV2+"\n", podV2)
			bundle := t.TempDir()
			if tt.config != "" {
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"--proc-root", n.proc, "--cgroup-root", n.cgroups, "--state-dir", n.state, "--claim", claimX,
				"--claim-name", "team/share", "--limit", uuidA + "=21474836480"}
			if tt.class != "" {
				args = append(args, "--non-root-class", tt.class)
			}
			cfg, err := ParseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA, uuidB)
			err = Run(cfg, strings.NewReader(`{"ociVersion":"1.2.0","id":"abcd","status":"creating","pid":4242,"bundle":"`+bundle+`"}`), lib)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, w := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Run error %v, want one containing %q", err, w)
				}
			}
			var nonRootErr *NonRootError
			if errors.As(err, &nonRootErr) != (len(tt.wantErr) > 0) {
				t.Errorf("Run error %v: NonRootError %v, want %v", err, !(len(tt.wantErr) > 0), len(tt.wantErr) > 0)
			}
			if got := len(lib.calls) > 0; got != tt.wantCall {
				t.Errorf("limit set: %v, want %v (calls %q)", got, tt.wantCall, lib.calls)
			}
			if !tt.wantCall {
				if _, err := os.Stat((records.Dir{Path: n.state}).ClaimsDir() + "/" + claimX + ".json"); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused container left its claim's record (stat: %v)", err)
				}
			}
		})
	}
}

//go:build cgo

package mocknvml_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

const node = "node-a"

var libraryPath string

// buildDir holds the builds of this test process, removed at its end.
var buildDir string

// Environment of a child test process (inVariant): the library it loads
// and the profile driver version it serves.
const (
	envChildLibrary = "MOCK_NVML_TEST_CHILD_LIBRARY"
	envChildDriver  = "MOCK_NVML_TEST_CHILD_DRIVER"
)

// TestMain builds the library once: every test loads it through go-nvml,
// exactly as the plugin does. One process can use one build only (the
// first library loaded binds every NVML symbol), so a test of another
// variant runs in a child process (inVariant), which loads the library
// its parent built.
func TestMain(m *testing.M) {
	if lib := os.Getenv(envChildLibrary); lib != "" {
		libraryPath = lib
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "mock-nvml-")
	if err == nil {
		// Readable by a child test process whatever its user.
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	libraryPath, err = mocknvml.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// serve points the library at profile p (as node-a; in a child, with the
// child's driver version) and a fresh state directory, initialises NVML
// and shuts it down at the end of the test.
func serve(t *testing.T, p *fakegpu.Profile) (nvml.Interface, mocknvml.State) {
	t.Helper()
	if v := os.Getenv(envChildDriver); v != "" {
		for i := range p.GPUs {
			p.GPUs[i].DriverVersion = v
		}
	}
	devices, err := mocknvml.Flatten(p, node)
	if err != nil {
		t.Fatal(err)
	}
	return serveDevices(t, devices)
}

// serveDevices is serve for a devices file as written.
func serveDevices(t *testing.T, devices []byte) (nvml.Interface, mocknvml.State) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "devices")
	if err := os.WriteFile(file, devices, 0o644); err != nil {
		t.Fatal(err)
	}
	state := mocknvml.State{Dir: filepath.Join(dir, "state", "nested")} // created with its parents
	t.Setenv(mocknvml.EnvDevicesFile, file)
	t.Setenv(mocknvml.EnvStateDir, state.Dir)
	lib := nvml.New(nvml.WithLibraryPath(libraryPath))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			t.Errorf("Shutdown: %v", ret)
		}
	})
	return lib, state
}

func builtin(t *testing.T, name string) *fakegpu.Profile {
	t.Helper()
	p, err := fakegpu.BuiltinProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ok(t *testing.T, what string, ret nvml.Return) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Fatalf("%s: %v", what, ret)
	}
}

func TestServesProfileThroughGoNVML(t *testing.T) {
	tests := []struct {
		profile      string
		wantName     string
		wantMemory   uint64
		wantArch     nvml.DeviceArchitecture
		wantCC       [2]int
		wantBusID0   string
		wantLinks0   int
		wantRemote0  string // far end of card 0's first link
		wantNUMACard [2]int // a card index and its NUMA node
	}{
		{"dgx-h100", "NVIDIA H100 80GB HBM3", 80 << 30, nvml.DEVICE_ARCH_HOPPER, [2]int{9, 0}, "00000000:1B:00.0", 4, "00000000:01:00.0", [2]int{5, 1}},
		{"pcie-a100-pairs", "NVIDIA A100-PCIE-40GB", 40 << 30, nvml.DEVICE_ARCH_AMPERE, [2]int{8, 0}, "00000000:17:00.0", 1, "00000000:31:00.0", [2]int{3, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			lib, _ := serve(t, builtin(t, tt.profile))
			count, ret := lib.DeviceGetCount()
			ok(t, "DeviceGetCount", ret)
			if count != 8 {
				t.Fatalf("DeviceGetCount = %d, want 8", count)
			}
			driver, ret := lib.SystemGetDriverVersion()
			ok(t, "SystemGetDriverVersion", ret)
			cuda, ret := lib.SystemGetCudaDriverVersion_v2()
			ok(t, "SystemGetCudaDriverVersion_v2", ret)
			if driver != "580.95.05" || cuda != 13000 {
				t.Errorf("driver %q CUDA %d, want 580.95.05 13000", driver, cuda)
			}
			for i := 0; i < count; i++ {
				dev, ret := lib.DeviceGetHandleByIndex(i)
				ok(t, "DeviceGetHandleByIndex", ret)
				uuid, ret := dev.GetUUID()
				ok(t, "GetUUID", ret)
				if want := fakegpu.FakeGPUUUID(node, i); uuid != want {
					t.Errorf("card %d UUID %s, want %s", i, uuid, want)
				}
				byUUID, ret := lib.DeviceGetHandleByUUID(uuid)
				ok(t, "DeviceGetHandleByUUID", ret)
				if idx, _ := byUUID.GetIndex(); idx != i {
					t.Errorf("DeviceGetHandleByUUID(%s) is card %d, want %d", uuid, idx, i)
				}
				name, ret := dev.GetName()
				ok(t, "GetName", ret)
				mem, ret := dev.GetMemoryInfo()
				ok(t, "GetMemoryInfo", ret)
				arch, ret := dev.GetArchitecture()
				ok(t, "GetArchitecture", ret)
				major, minor, ret := dev.GetCudaComputeCapability()
				ok(t, "GetCudaComputeCapability", ret)
				brand, ret := dev.GetBrand()
				ok(t, "GetBrand", ret)
				minorNumber, ret := dev.GetMinorNumber()
				ok(t, "GetMinorNumber", ret)
				if name != tt.wantName || mem.Total != tt.wantMemory || arch != tt.wantArch ||
					[2]int{major, minor} != tt.wantCC || brand != nvml.BRAND_NVIDIA || minorNumber != i {
					t.Errorf("card %d: %q %d %d %d.%d brand %d minor %d", i, name, mem.Total, arch, major, minor, brand, minorNumber)
				}
				mode, ret := dev.GetComputeMode()
				ok(t, "GetComputeMode", ret)
				if mode != nvml.COMPUTEMODE_DEFAULT {
					t.Errorf("card %d starts in compute mode %d, want DEFAULT", i, mode)
				}
			}
			dev0, _ := lib.DeviceGetHandleByIndex(0)
			pci, ret := dev0.GetPciInfo()
			ok(t, "GetPciInfo", ret)
			if got := cstr(pci.BusId[:]); got != tt.wantBusID0 || pci.PciDeviceId&0xffff != 0x10de {
				t.Errorf("card 0 bus ID %q vendor %#x, want %q and NVIDIA", got, pci.PciDeviceId&0xffff, tt.wantBusID0)
			}
			byBus, ret := lib.DeviceGetHandleByPciBusId(strings.ToLower(tt.wantBusID0))
			ok(t, "DeviceGetHandleByPciBusId", ret)
			if idx, _ := byBus.GetIndex(); idx != 0 {
				t.Errorf("DeviceGetHandleByPciBusId is card %d, want 0", idx)
			}
			links := 0
			for link := 0; ; link++ {
				state, ret := dev0.GetNvLinkState(link)
				if errors.Is(ret, nvml.ERROR_INVALID_ARGUMENT) {
					break
				}
				ok(t, "GetNvLinkState", ret)
				if state != nvml.FEATURE_ENABLED {
					t.Errorf("link %d is not active", link)
				}
				links++
			}
			remote, ret := dev0.GetNvLinkRemotePciInfo(0)
			ok(t, "GetNvLinkRemotePciInfo", ret)
			if links != tt.wantLinks0 || cstr(remote.BusId[:]) != tt.wantRemote0 {
				t.Errorf("card 0: %d links, link 0 to %s; want %d, %s", links, cstr(remote.BusId[:]), tt.wantLinks0, tt.wantRemote0)
			}
			card, _ := lib.DeviceGetHandleByIndex(tt.wantNUMACard[0])
			numa, ret := card.GetNumaNodeId()
			ok(t, "GetNumaNodeId", ret)
			if numa != tt.wantNUMACard[1] {
				t.Errorf("card %d NUMA node %d, want %d", tt.wantNUMACard[0], numa, tt.wantNUMACard[1])
			}
		})
	}
}

// An empty optional field is NOT_SUPPORTED, as on a real card that cannot
// tell, and a card without NVLink says so at link 0.
func TestLeftOutFieldsAreNotSupported(t *testing.T) {
	// Built in Go: a parsed file would get the fake driver's defaults.
	p := &fakegpu.Profile{Name: "bare", GPUs: []fakegpu.ProfileGPU{{Index: 0, ProductName: "Bare", Memory: "16Gi", PCIBusID: "0000:3b:00.0"}}}
	lib, _ := serve(t, p)
	dev, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, "DeviceGetHandleByIndex", ret)
	_, archRet := dev.GetArchitecture()
	_, brandRet := dev.GetBrand()
	_, _, ccRet := dev.GetCudaComputeCapability()
	_, numaRet := dev.GetNumaNodeId()
	_, linkRet := dev.GetNvLinkState(0)
	_, driverRet := lib.SystemGetDriverVersion()
	_, fabricRet := dev.GetGpuFabricInfo()
	for what, ret := range map[string]nvml.Return{"architecture": archRet, "brand": brandRet, "compute capability": ccRet,
		"NUMA": numaRet, "NVLink": linkRet, "driver version": driverRet, "fabric": fabricRet} {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s: %v, want ERROR_NOT_SUPPORTED", what, ret)
		}
	}
}

// Calls the mock does not implement answer NOT_SUPPORTED instead of
// killing the process with an unresolved symbol.
func TestUnimplementedCallsAreNotSupported(t *testing.T) {
	lib, _ := serve(t, builtin(t, "pcie-a100-pairs"))
	dev, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, "DeviceGetHandleByIndex", ret)
	_, tempRet := dev.GetTemperature(nvml.TEMPERATURE_GPU)
	_, powerRet := dev.GetPowerUsage()
	_, _, migRet := dev.GetMigMode()
	_, serialRet := dev.GetSerial()
	_, procRet := lib.SystemGetProcessName(1)
	memLimitRet := dev.SetPersistenceMode(nvml.FEATURE_ENABLED)
	for what, ret := range map[string]nvml.Return{"GetTemperature": tempRet, "GetPowerUsage": powerRet, "GetMigMode": migRet,
		"GetSerial": serialRet, "SystemGetProcessName": procRet, "SetPersistenceMode": memLimitRet} {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s: %v, want ERROR_NOT_SUPPORTED", what, ret)
		}
	}
	if s := nvml.ERROR_NOT_SUPPORTED.Error(); s != "Not Supported" {
		t.Errorf("nvmlErrorString(NOT_SUPPORTED) = %q", s)
	}
}

func TestComputeModeIsLoggedAndKept(t *testing.T) {
	lib, state := serve(t, builtin(t, "dgx-h100"))
	dev, ret := lib.DeviceGetHandleByIndex(3)
	ok(t, "DeviceGetHandleByIndex", ret)
	uuid := fakegpu.FakeGPUUUID(node, 3)
	ok(t, "SetComputeMode", dev.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS))
	if ret := dev.SetComputeMode(nvml.ComputeMode(42)); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("SetComputeMode(42) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	mode, ret := dev.GetComputeMode()
	ok(t, "GetComputeMode", ret)
	if mode != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode %d after set, want EXCLUSIVE_PROCESS", mode)
	}

	// A second user of the library (a restarted plugin) sees the mode the
	// first one set; shutting NVML down to zero reloads the devices.
	other := nvml.New(nvml.WithLibraryPath(libraryPath))
	ok(t, "second Init", other.Init())
	again, _ := other.DeviceGetHandleByUUID(uuid)
	ok(t, "SetComputeMode", again.SetComputeMode(nvml.COMPUTEMODE_DEFAULT))
	ok(t, "second Shutdown", other.Shutdown())
	mode, _ = dev.GetComputeMode()
	if mode != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute mode %d after the second user reset it, want DEFAULT", mode)
	}

	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"nvmlDeviceSetComputeMode index=3 uuid=" + uuid + " mode=EXCLUSIVE_PROCESS",
		"nvmlDeviceSetComputeMode index=3 uuid=" + uuid + " mode=DEFAULT",
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("calls.log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestEvents(t *testing.T) {
	lib, state := serve(t, builtin(t, "dgx-h100"))
	// An event from before the set existed is not delivered.
	if err := state.TriggerXID(2, 13); err != nil {
		t.Fatal(err)
	}
	set, ret := lib.EventSetCreate()
	ok(t, "EventSetCreate", ret)
	defer func() { ok(t, "EventSetFree", set.Free()) }()
	card2, _ := lib.DeviceGetHandleByIndex(2)
	card5, _ := lib.DeviceGetHandleByIndex(5)
	types, ret := card2.GetSupportedEventTypes()
	ok(t, "GetSupportedEventTypes", ret)
	if types&nvml.EventTypeXidCriticalError == 0 {
		t.Fatalf("supported event types %#x lack XID", types)
	}
	ok(t, "RegisterEvents", card2.RegisterEvents(nvml.EventTypeXidCriticalError, set))
	if ret := card5.RegisterEvents(nvml.EventTypePState, set); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("registering P-state events: %v, want ERROR_NOT_SUPPORTED", ret)
	}

	if _, ret := set.Wait(50); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait with no event: %v, want ERROR_TIMEOUT", ret)
	}
	// Card 5 is not registered: its XID is skipped, card 2's delivered.
	for _, trigger := range []func() error{
		func() error { return state.TriggerXID(5, 48) },
		func() error { return state.TriggerXID(2, 79) },
		func() error { return state.LoseGPU(2) },
	} {
		if err := trigger(); err != nil {
			t.Fatal(err)
		}
	}
	data, ret := set.Wait(5000)
	ok(t, "Wait", ret)
	uuid, _ := data.Device.GetUUID()
	if data.EventType != nvml.EventTypeXidCriticalError || data.EventData != 79 || uuid != fakegpu.FakeGPUUUID(node, 2) {
		t.Errorf("event type %#x data %d on %s, want XID 79 on card 2", data.EventType, data.EventData, uuid)
	}
	data, ret = set.Wait(5000)
	if ret != nvml.ERROR_GPU_IS_LOST {
		t.Fatalf("Wait after gpu-lost: %v, want ERROR_GPU_IS_LOST", ret)
	}
	if idx, _ := data.Device.GetIndex(); idx != 2 {
		t.Errorf("lost card %d, want 2", idx)
	}
	if _, ret := set.Wait(20); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait after all events: %v, want ERROR_TIMEOUT", ret)
	}
}

func TestBadDevicesFileFailsInit(t *testing.T) {
	tests := map[string]string{
		"wrong version":                 "tangram-mock-nvml 9\n",
		"short gpu":                     "tangram-mock-nvml 1\ngpu 0 0 GPU-x\n",
		"unknown card":                  "tangram-mock-nvml 1\nname 3 Foo\n",
		"unknown kind":                  "tangram-mock-nvml 1\nbogus 0\n",
		"reserved not below the memory": "tangram-mock-nvml 1\ngpu 0 0 GPU-x 00000000:3B:00.0 1073741824 -1 -1 -1 -1 0 1073741824\n",
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "devices")
			if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv(mocknvml.EnvDevicesFile, file)
			lib := nvml.New(nvml.WithLibraryPath(libraryPath))
			if ret := lib.Init(); ret != nvml.ERROR_UNKNOWN {
				t.Errorf("Init: %v, want ERROR_UNKNOWN", ret)
				_ = lib.Shutdown()
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Setenv(mocknvml.EnvDevicesFile, filepath.Join(t.TempDir(), "absent"))
		if ret := nvml.New(nvml.WithLibraryPath(libraryPath)).Init(); ret != nvml.ERROR_UNKNOWN {
			t.Errorf("Init: %v, want ERROR_UNKNOWN", ret)
		}
	})
}

// TestMemoryReservedAsNVMLDocuments: the driver keeps part of each card
// (the devices file's reserved column), reported as NVIDIA documents it
// (nvml.h nvmlMemory_t and nvmlMemory_v2_t; NVIDIA-FACTS.md "Memory the
// driver keeps"): v2 gives total, reserved, free = total - reserved - used
// and used (allocated, none here); v1 the same total with the reserved
// memory inside used. A card with no column has none reserved.
func TestMemoryReservedAsNVMLDocuments(t *testing.T) {
	const reserved = 462 << 20
	devices, err := mocknvml.Flatten(builtin(t, "dgx-h100"), node)
	if err != nil {
		t.Fatal(err)
	}
	if devices, err = mocknvml.WithReservedMemory(devices, map[int]int64{0: reserved, 5: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	lib, _ := serveDevices(t, devices)
	for _, tt := range []struct {
		index    int
		reserved uint64
	}{{0, reserved}, {5, 1 << 30}, {3, 0}} {
		dev, ret := lib.DeviceGetHandleByIndex(tt.index)
		ok(t, "DeviceGetHandleByIndex", ret)
		v2, ret := dev.GetMemoryInfo_v2()
		ok(t, "GetMemoryInfo_v2", ret)
		if want := (nvml.Memory_v2{Version: v2.Version, Total: 80 << 30, Reserved: tt.reserved, Free: 80<<30 - tt.reserved, Used: 0}); v2 != want {
			t.Errorf("card %d: GetMemoryInfo_v2 = %+v, want %+v", tt.index, v2, want)
		}
		if v2.Total != v2.Reserved+v2.Free+v2.Used {
			t.Errorf("card %d: v2 total %d is not reserved + free + used", tt.index, v2.Total)
		}
		v1, ret := dev.GetMemoryInfo()
		ok(t, "GetMemoryInfo", ret)
		if want := (nvml.Memory{Total: 80 << 30, Free: 80<<30 - tt.reserved, Used: tt.reserved}); v1 != want {
			t.Errorf("card %d: GetMemoryInfo = %+v, want %+v (used is reserved + allocated)", tt.index, v1, want)
		}
	}
}

// A devices file names reserved memory for cards it has only.
func TestWithReservedMemoryRejects(t *testing.T) {
	devices, err := mocknvml.Flatten(builtin(t, "pcie-l4"), node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mocknvml.WithReservedMemory(devices, map[int]int64{42: 1}); err == nil {
		t.Error("reserved memory on card 42 of a profile without it: no error")
	}
	if _, err := mocknvml.WithReservedMemory(devices, map[int]int64{0: -1}); err == nil {
		t.Error("negative reserved memory: no error")
	}
}

func cstr(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// variantLibraries are the libraries built for inVariant, by driver version.
var (
	variantMu        sync.Mutex
	variantLibraries = map[string]string{}
)

// inVariant runs the calling test again in a child process that loads the
// library built as driver version driver, as user uid (0: root). It
// returns true in the child, where the test goes on; in the parent it
// returns false after failing the test with the child's output if the
// child failed.
func inVariant(t *testing.T, driver string, uid int) bool {
	t.Helper()
	if os.Getenv(envChildLibrary) != "" {
		return true
	}
	variantMu.Lock()
	lib, ok := variantLibraries[driver]
	if !ok {
		var err error
		if lib, err = mocknvml.BuildDriver(filepath.Join(buildDir, "driver-"+driver), driver); err != nil {
			variantMu.Unlock()
			t.Fatal(err)
		}
		variantLibraries[driver] = lib
	}
	variantMu.Unlock()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if uid != 0 {
		// The test binary sits in a directory only root may enter.
		bin := filepath.Join(filepath.Dir(lib), "mock-nvml.test")
		if _, err := os.Stat(bin); err != nil {
			data, err := os.ReadFile(self)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bin, data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		self = bin
	}
	cmd := exec.Command(self, "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), envChildLibrary+"="+lib, envChildDriver+"="+driver)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		// t.TempDir of the child lives under $TMPDIR: a fresh one it may write.
		tmp, err := os.MkdirTemp("", "mock-nvml-child-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(tmp) })
		if err := os.Chmod(tmp, 0o777); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "TMPDIR="+tmp, "HOME="+tmp, "GOCACHE="+tmp)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Errorf("%s with the library built as driver %s (uid %d): %v\n%s", t.Name(), driver, uid, err, out)
	}
	return false
}

// dmemCgroup is a cgroup directory as a dmem kernel lays it out when the
// parent enables dmem in cgroup.subtree_control.
func dmemCgroup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dmem.max"), []byte("drm/0000:1b:00.0/vram0 max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMemoryLimitRules holds the mock's per-cgroup memory limits to what
// NVIDIA documents, one rule a row, each with its source: nvml.h as
// go-nvml v0.13.4-1 ships it (the header of the r615 library), and
// /work/shared/notes/NVIDIA-FACTS.md ("Per-cgroup GPU memory limits").
// It runs in a child process on the library built as driver 615.
func TestMemoryLimitRules(t *testing.T) {
	if !inVariant(t, mocknvml.MemoryLimitsDriver, 0) {
		return
	}
	const share = 20 << 30
	tests := []struct {
		rule, source string
		kernelDmem   string // TANGRAM_MOCK_NVML_KERNEL_DMEM
		mig          bool   // MIG mode on for the card
		cgroup       func(t *testing.T) string
		soft, hard   uint64
		want         nvml.Return
		wantLogged   bool // the call reaches calls.log (past the argument checks)
	}{
		{"a cgroup with dmem.* files on a dmem kernel takes the limit", "NVIDIA-FACTS.md, Kernel row",
			"1", false, dmemCgroup, 0, share, nvml.SUCCESS, true},
		{"a cgroup without dmem.* files on a dmem kernel: not found", "NVIDIA-FACTS.md, Kernel row (\"returns not found\")",
			"1", false, func(t *testing.T) string { return t.TempDir() }, 0, share, nvml.ERROR_NOT_FOUND, true},
		{"a kernel without dmem: the driver's own backend takes an existing cgroup (unconfirmed)", "NVIDIA-FACTS.md, Kernel row (\"older kernels use a driver-internal backend\")",
			"0", false, func(t *testing.T) string { return t.TempDir() }, 0, share, nvml.SUCCESS, true},
		{"MIG mode on: not supported", "nvml.h nvmlDeviceSetMemoryLimits_v1 (\"MIG handles are not supported\"); NVIDIA-FACTS.md, Not supported row",
			"1", true, dmemCgroup, 0, share, nvml.ERROR_NOT_SUPPORTED, true},
		{"a cgroup path that cannot be opened", "nvml.h nvmlDeviceSetMemoryLimits_v1 (OPERATING_SYSTEM)",
			"0", false, func(t *testing.T) string { return filepath.Join(t.TempDir(), "gone") }, 0, share, nvml.ERROR_OPERATING_SYSTEM, true},
		{"soft limit above the hard limit", "nvml.h nvmlDeviceSetMemoryLimits_v1 (INVALID_ARGUMENT)",
			"1", false, dmemCgroup, 2, 1, nvml.ERROR_INVALID_ARGUMENT, false},
		{"hard limit above the card's memory", "nvml.h nvmlDeviceSetMemoryLimits_v1 (INVALID_ARGUMENT)",
			"1", false, dmemCgroup, 0, 81 << 30, nvml.ERROR_INVALID_ARGUMENT, false},
		{"a relative cgroup path: the namespace is the cgroup's full sysfs path", "nvml.h nvmlSetMemoryLimits_v1_t.nameSpace; NVIDIA-FACTS.md, API row",
			"0", false, func(*testing.T) string { return "kubepods/pod" }, 0, share, nvml.ERROR_INVALID_ARGUMENT, false},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			t.Setenv(mocknvml.EnvKernelDmem, tt.kernelDmem)
			lib, state := serve(t, builtin(t, "dgx-h100"))
			dev, ret := lib.DeviceGetHandleByIndex(2)
			ok(t, "DeviceGetHandleByIndex", ret)
			uuid := fakegpu.FakeGPUUUID(node, 2)
			if tt.mig {
				if err := state.SetMigMode(uuid, true); err != nil {
					t.Fatal(err)
				}
			}
			cgroup := tt.cgroup(t)
			before := time.Now()
			if ret := dev.SetMemoryLimits_v1(cgroup, tt.soft, tt.hard); ret != tt.want {
				t.Fatalf("SetMemoryLimits_v1 = %v, want %v (source: %s)", ret, tt.want, tt.source)
			}
			calls, err := state.Calls()
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantLogged {
				if len(calls) != 0 {
					t.Errorf("calls.log has %v, want nothing for refused arguments", calls)
				}
				return
			}
			want := fmt.Sprintf("nvmlDeviceSetMemoryLimits_v1 index=2 uuid=%s namespace=%s soft=%d hard=%d result=%d", uuid, cgroup, tt.soft, tt.hard, int(tt.want))
			if len(calls) != 1 || calls[0].String() != want {
				t.Fatalf("calls.log %v, want one line %q", calls, want)
			}
			at, err := calls[0].Time()
			if err != nil {
				t.Fatal(err)
			}
			if at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
				t.Errorf("call logged at %v, not while the test ran (from %v)", at, before)
			}
			// Read back as nvidia-smi memory-limits --get does: the limit
			// only if it was set.
			got, ret := dev.GetMemoryLimits_v1(cgroup)
			switch {
			case tt.want == nvml.SUCCESS && (ret != nvml.SUCCESS || got.SoftLimit != tt.soft || got.HardLimit != tt.hard):
				t.Errorf("GetMemoryLimits_v1 = %+v, %v; want soft %d hard %d", got, ret, tt.soft, tt.hard)
			case tt.want != nvml.SUCCESS && ret == nvml.SUCCESS:
				t.Errorf("GetMemoryLimits_v1 = %+v after a refused set, want no limit", got)
			}
		})
	}
}

// TestMemoryLimitsReadBackAndFailureKnob: the last limit set is what a
// later reader in another process gets (nvml.h nvmlDeviceGetMemoryLimits_v1:
// NOT_FOUND without limits), and the fail-closed knob refuses every set,
// still logged.
func TestMemoryLimitsReadBackAndFailureKnob(t *testing.T) {
	if !inVariant(t, mocknvml.MemoryLimitsDriver, 0) {
		return
	}
	t.Setenv(mocknvml.EnvKernelDmem, "1")
	lib, state := serve(t, builtin(t, "dgx-h100"))
	dev, ret := lib.DeviceGetHandleByIndex(2)
	ok(t, "DeviceGetHandleByIndex", ret)
	cgroup := dmemCgroup(t)
	if _, ret := dev.GetMemoryLimits_v1(cgroup); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetMemoryLimits_v1 before any set = %v, want ERROR_NOT_FOUND", ret)
	}
	ok(t, "SetMemoryLimits_v1", dev.SetMemoryLimits_v1(cgroup, 0, 20<<30))
	if err := state.FailMemoryLimits(int(nvml.ERROR_NO_PERMISSION)); err != nil {
		t.Fatal(err)
	}
	if ret := dev.SetMemoryLimits_v1(cgroup, 0, 30<<30); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("SetMemoryLimits_v1 with the failure knob = %v, want ERROR_NO_PERMISSION", ret)
	}
	if err := state.AllowMemoryLimits(); err != nil {
		t.Fatal(err)
	}
	ok(t, "SetMemoryLimits_v1 after AllowMemoryLimits", dev.SetMemoryLimits_v1(cgroup, 0, 10<<30))
	got, ret := dev.GetMemoryLimits_v1(cgroup)
	ok(t, "GetMemoryLimits_v1", ret)
	if got.HardLimit != 10<<30 {
		t.Errorf("GetMemoryLimits_v1 hard %d, want the last limit set, %d", got.HardLimit, uint64(10<<30))
	}
	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, c := range calls {
		results = append(results, c.Args["hard"]+":"+c.Args["result"])
	}
	if want := []string{"21474836480:0", "32212254720:4", "10737418240:0"}; !reflect.DeepEqual(results, want) {
		t.Errorf("calls.log hard:result %v, want %v", results, want)
	}
}

// TestMemoryLimitsNeedRoot: nvml.h nvmlDeviceSetMemoryLimits_v1 "requires
// root/admin permissions" (NVIDIA-FACTS.md, API row: root only).
func TestMemoryLimitsNeedRoot(t *testing.T) {
	if os.Getenv(envChildLibrary) == "" && os.Geteuid() != 0 {
		t.Fatal("run this test as root: it checks that another user is refused")
	}
	if !inVariant(t, mocknvml.MemoryLimitsDriver, 65534) {
		return
	}
	if os.Geteuid() == 0 {
		t.Fatal("the child should run as uid 65534")
	}
	t.Setenv(mocknvml.EnvKernelDmem, "0")
	lib, state := serve(t, builtin(t, "dgx-h100"))
	dev, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, "DeviceGetHandleByIndex", ret)
	if ret := dev.SetMemoryLimits_v1(t.TempDir(), 0, 1<<30); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("SetMemoryLimits_v1 as uid %d = %v, want ERROR_NO_PERMISSION", os.Geteuid(), ret)
	}
	if calls, err := state.Calls(); err != nil || len(calls) != 1 || calls[0].Args["result"] != "4" {
		t.Errorf("calls.log %v (%v), want the refused call with result 4", calls, err)
	}
}

// TestMemoryLimitSymbolFollowsTheDriver: before r615 the library has no
// nvmlDeviceSetMemoryLimits_v1 or nvmlDeviceGetMemoryLimits_v1 at all
// (NVIDIA-FACTS.md, Older drivers row; added between r610 and r615);
// go-nvml would die on calling it, so callers look it up first. A devices
// file naming a driver of the other kind fails Init: one library, one
// driver.
func TestMemoryLimitSymbolFollowsTheDriver(t *testing.T) {
	check := func(t *testing.T, wantSymbol bool) {
		lib, _ := serve(t, builtin(t, "pcie-l4"))
		for _, sym := range []string{"nvmlDeviceSetMemoryLimits_v1", "nvmlDeviceGetMemoryLimits_v1"} {
			err := lib.Extensions().LookupSymbol(sym)
			if (err == nil) != wantSymbol {
				t.Errorf("LookupSymbol(%s) = %v, want the symbol present: %v", sym, err, wantSymbol)
			}
		}
		d, ret := lib.DeviceGetHandleByIndex(0)
		ok(t, "DeviceGetHandleByIndex", ret)
		if cur, pending, ret := d.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("GetMigMode of a card never set = %d/%d %v, want ERROR_NOT_SUPPORTED", cur, pending, ret)
		}
	}
	t.Run("580: absent", func(t *testing.T) { check(t, false) })
	t.Run("580 library, 615 devices file: Init fails", func(t *testing.T) {
		p := builtin(t, "pcie-l4")
		for i := range p.GPUs {
			p.GPUs[i].DriverVersion = mocknvml.MemoryLimitsDriver
		}
		mocknvml.UseProfile(t, p, node)
		if ret := nvml.New(nvml.WithLibraryPath(libraryPath)).Init(); ret != nvml.ERROR_UNKNOWN {
			t.Errorf("Init = %v, want ERROR_UNKNOWN", ret)
		}
	})
	t.Run("615: present", func(t *testing.T) {
		if inVariant(t, mocknvml.MemoryLimitsDriver, 0) {
			check(t, true)
		}
	})
}

// TestMigModeIsKept: a card set to MIG mode reports it to any process.
func TestMigModeIsKept(t *testing.T) {
	lib, state := serve(t, builtin(t, "dgx-h100"))
	uuid := fakegpu.FakeGPUUUID(node, 3)
	if err := state.SetMigMode(uuid, true); err != nil {
		t.Fatal(err)
	}
	dev, ret := lib.DeviceGetHandleByIndex(3)
	ok(t, "DeviceGetHandleByIndex", ret)
	cur, pending, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE || pending != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("GetMigMode = %d/%d %v, want enabled", cur, pending, ret)
	}
	if err := state.SetMigMode(uuid, false); err != nil {
		t.Fatal(err)
	}
	if cur, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("GetMigMode after turning it off = %d %v, want disabled", cur, ret)
	}
}

// TestProcessesAsNVMLDocuments: the process lists follow NVML's size
// protocol (a count of 0 asks; too small answers INSUFFICIENT_SIZE with
// the count needed), all ones for memory NVML does not give and for a GPU
// instance outside MIG, MPS clients in their own list, through go-nvml
// as the plugin calls them.
func TestProcessesAsNVMLDocuments(t *testing.T) {
	lib, state := serve(t, builtin(t, "dgx-h100"))
	uuid0, uuid1 := fakegpu.FakeGPUUUID(node, 0), fakegpu.FakeGPUUUID(node, 1)
	dev0, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, "DeviceGetHandleByIndex", ret)
	dev1, ret := lib.DeviceGetHandleByIndex(1)
	ok(t, "DeviceGetHandleByIndex", ret)

	// Nothing runs yet.
	if procs, ret := dev0.GetComputeRunningProcesses(); ret != nvml.SUCCESS || len(procs) != 0 {
		t.Errorf("before any process: %v, %v", procs, ret)
	}
	var run []mocknvml.Process
	for pid := 100; pid < 103; pid++ {
		run = append(run, mocknvml.Process{Card: uuid0, PID: pid, UsedBytes: int64(pid) << 20, GPUInstance: -1})
	}
	run = append(run,
		mocknvml.Process{Card: uuid0, PID: 200, UsedBytes: -1, GPUInstance: -1},
		mocknvml.Process{Card: uuid0, PID: 300, UsedBytes: 4 << 30, GPUInstance: -1, MPSClient: true},
		mocknvml.Process{Card: uuid1, PID: 400, UsedBytes: 1 << 30, GPUInstance: 2})
	if err := state.RunProcesses(run); err != nil {
		t.Fatal(err)
	}
	// go-nvml starts with room for one: two doublings for four.
	procs, ret := dev0.GetComputeRunningProcesses()
	ok(t, "GetComputeRunningProcesses", ret)
	want := []nvml.ProcessInfo{
		{Pid: 100, UsedGpuMemory: 100 << 20, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Pid: 101, UsedGpuMemory: 101 << 20, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Pid: 102, UsedGpuMemory: 102 << 20, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
		{Pid: 200, UsedGpuMemory: math.MaxUint64, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF},
	}
	if !reflect.DeepEqual(procs, want) {
		t.Errorf("compute processes of card 0:\n%+v\nwant\n%+v", procs, want)
	}
	mps, ret := dev0.GetMPSComputeRunningProcesses()
	ok(t, "GetMPSComputeRunningProcesses", ret)
	if len(mps) != 1 || mps[0].Pid != 300 || mps[0].UsedGpuMemory != 4<<30 {
		t.Errorf("MPS clients of card 0: %+v, want pid 300 with 4 GiB", mps)
	}
	procs, ret = dev1.GetComputeRunningProcesses()
	ok(t, "GetComputeRunningProcesses", ret)
	if len(procs) != 1 || procs[0].Pid != 400 || procs[0].GpuInstanceId != 2 || procs[0].ComputeInstanceId != 0 {
		t.Errorf("compute processes of card 1: %+v, want pid 400 in GPU instance 2", procs)
	}
}

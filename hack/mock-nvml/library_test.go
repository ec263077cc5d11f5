//go:build cgo

package mocknvml_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

const node = "node-a"

var libraryPath string

// TestMain builds the library once: every test loads it through go-nvml,
// exactly as the plugin does.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mock-nvml-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	libraryPath, err = mocknvml.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// serve points the library at profile p (as node-a) and a fresh state
// directory, initialises NVML and shuts it down at the end of the test.
func serve(t *testing.T, p *fakegpu.Profile) (nvml.Interface, mocknvml.State) {
	t.Helper()
	devices, err := mocknvml.Flatten(p, node)
	if err != nil {
		t.Fatal(err)
	}
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
		"wrong version": "tangram-mock-nvml 9\n",
		"short gpu":     "tangram-mock-nvml 1\ngpu 0 0 GPU-x\n",
		"unknown card":  "tangram-mock-nvml 1\nname 3 Foo\n",
		"unknown kind":  "tangram-mock-nvml 1\nbogus 0\n",
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

func TestMemoryLimitsAreLoggedAndKept(t *testing.T) {
	lib, state := serve(t, builtin(t, "dgx-h100"))
	dev, ret := lib.DeviceGetHandleByIndex(2)
	ok(t, "DeviceGetHandleByIndex", ret)
	uuid := fakegpu.FakeGPUUUID(node, 2)
	cgroup := t.TempDir()
	const share = 20 << 30

	before := time.Now()
	ok(t, "SetMemoryLimits_v1", dev.SetMemoryLimits_v1(cgroup, 0, share))
	got, ret := dev.GetMemoryLimits_v1(cgroup)
	ok(t, "GetMemoryLimits_v1", ret)
	if got.SoftLimit != 0 || got.HardLimit != share {
		t.Errorf("GetMemoryLimits_v1 = soft %d hard %d, want 0 %d", got.SoftLimit, got.HardLimit, uint64(share))
	}
	if _, ret := dev.GetMemoryLimits_v1(t.TempDir()); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetMemoryLimits_v1 of a cgroup without limits = %v, want ERROR_NOT_FOUND", ret)
	}

	for _, tt := range []struct {
		name       string
		namespace  string
		soft, hard uint64
		want       nvml.Return
	}{
		{"soft above hard", cgroup, 2, 1, nvml.ERROR_INVALID_ARGUMENT},
		{"hard above the card's memory", cgroup, 0, 81 << 30, nvml.ERROR_INVALID_ARGUMENT},
		{"relative path", "kubepods/pod", 0, share, nvml.ERROR_INVALID_ARGUMENT},
		{"missing cgroup", filepath.Join(cgroup, "gone"), 0, share, nvml.ERROR_OPERATING_SYSTEM},
	} {
		if ret := dev.SetMemoryLimits_v1(tt.namespace, tt.soft, tt.hard); ret != tt.want {
			t.Errorf("%s: SetMemoryLimits_v1 = %v, want %v", tt.name, ret, tt.want)
		}
	}

	// The fail-closed knob: the call is refused, and still logged.
	if err := state.FailMemoryLimits(int(nvml.ERROR_NO_PERMISSION)); err != nil {
		t.Fatal(err)
	}
	if ret := dev.SetMemoryLimits_v1(cgroup, 0, share); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("SetMemoryLimits_v1 with the failure knob = %v, want ERROR_NO_PERMISSION", ret)
	}
	if err := state.AllowMemoryLimits(); err != nil {
		t.Fatal(err)
	}
	ok(t, "SetMemoryLimits_v1 after AllowMemoryLimits", dev.SetMemoryLimits_v1(cgroup, 0, share/2))

	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	prefix := "nvmlDeviceSetMemoryLimits_v1 index=2 uuid=" + uuid + " namespace=" + cgroup + " soft=0 hard="
	want := []string{
		prefix + "21474836480 result=0",
		prefix + "21474836480 result=4", // NVML_ERROR_NO_PERMISSION
		prefix + "10737418240 result=0",
	}
	var lines []string
	for _, c := range calls {
		if c.Args["namespace"] != cgroup || c.Args["soft"] != "0" {
			continue // the refused arguments
		}
		lines = append(lines, c.String())
		at, err := c.Time()
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
			t.Errorf("call logged at %v, not while the test ran (from %v)", at, before)
		}
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("calls.log:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

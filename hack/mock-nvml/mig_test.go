//go:build cgo

package mocknvml_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// migCard is a one-card profile of a MIG card type.
func migCard(t *testing.T, migType, product, memory, mode string) *fakegpu.Profile {
	t.Helper()
	p, err := fakegpu.ParseProfile([]byte(fmt.Sprintf(`
gpus:
- {index: 0, productName: %q, memory: %s, pciBusID: "0000:1b:00.0", migType: %s, migMode: %s}
`, product, memory, migType, mode)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// guideProfile is one row of the MIG user guide's profile tables, as
// nvidia-smi mig -lgip/-lgipp print it: profile ID, compute slices
// (sevenths of the SMs), memory slices (eighths of the memory), instances,
// SMs, copy engines, memory in MiB and placements "{starts}:size".
type guideProfile struct {
	name       string
	id         int
	compute    int
	memory     int
	instances  int
	sms        int
	ce         int
	mib        uint64
	placements string
}

// The MIG user guide, "Supported MIG Profiles"
// (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html):
// tables "A100 MIG Profiles" (A100-SXM4-40GB; for 80GB the guide renames
// them 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb),
// "H100 MIG Profiles" (H100-SXM5-80GB) and "H200 MIG Profiles" (H200-SXM5
// 141GB): fraction of memory, fraction of SMs, copy engines, number of
// instances. Placements: nvidia-smi mig -lgipp in "Getting Started with
// MIG" (A100: 7g {0}:8, 4g {0}:4, 3g {0,4}:4, 2g {0,2,4}:2, 1g
// {0,...,6}:1, 1g with two memory slices {0,2,4,6}:2), the same slice
// layout on H100/H200. SM counts: nvidia-smi mig -lgip on each card.
// Memory in MiB, as NVML reports it (not an eighth of the card per slice):
// A100 40GB, the guide's nvidia-smi mig -lgip in "Getting Started with
// MIG", "List GPU Instance Profiles" (4.75, 9.62, 19.50, 39.25 GiB); H200,
// what NVML reported on an H200, r580.159.04
// (docs/gpu-reports/h200-580.159.04-nvml-mig.json); A100 80GB and H100
// 80GB: the guide prints none, these are nvidia-smi mig -lgip on real
// cards in public reports (A100 80GB 9.50, 19.50, 39.25, 79.00 GiB; H100
// 9.75, 19.62, 39.50, 79.25 GiB), unverified by us.
var guideTables = map[string][]guideProfile{
	"a100-40gb": {
		{"1g.5gb", 19, 1, 1, 7, 14, 1, 4864, "{0,1,2,3,4,5,6}:1"},
		{"1g.5gb+me", 20, 1, 1, 1, 14, 1, 4864, "{0,1,2,3,4,5,6}:1"},
		{"1g.10gb", 15, 1, 2, 4, 14, 1, 9856, "{0,2,4,6}:2"},
		{"2g.10gb", 14, 2, 2, 3, 28, 2, 9856, "{0,2,4}:2"},
		{"3g.20gb", 9, 3, 4, 2, 42, 3, 19968, "{0,4}:4"},
		{"4g.20gb", 5, 4, 4, 1, 56, 4, 19968, "{0}:4"},
		{"7g.40gb", 0, 7, 8, 1, 98, 7, 40192, "{0}:8"},
	},
	"a100-80gb": {
		{"1g.10gb", 19, 1, 1, 7, 14, 1, 9728, "{0,1,2,3,4,5,6}:1"},
		{"1g.10gb+me", 20, 1, 1, 1, 14, 1, 9728, "{0,1,2,3,4,5,6}:1"},
		{"1g.20gb", 15, 1, 2, 4, 14, 1, 19968, "{0,2,4,6}:2"},
		{"2g.20gb", 14, 2, 2, 3, 28, 2, 19968, "{0,2,4}:2"},
		{"3g.40gb", 9, 3, 4, 2, 42, 3, 40192, "{0,4}:4"},
		{"4g.40gb", 5, 4, 4, 1, 56, 4, 40192, "{0}:4"},
		{"7g.80gb", 0, 7, 8, 1, 98, 7, 80896, "{0}:8"},
	},
	"h100-80gb": {
		{"1g.10gb", 19, 1, 1, 7, 16, 1, 9984, "{0,1,2,3,4,5,6}:1"},
		{"1g.10gb+me", 20, 1, 1, 1, 16, 1, 9984, "{0,1,2,3,4,5,6}:1"},
		{"1g.20gb", 15, 1, 2, 4, 26, 1, 20096, "{0,2,4,6}:2"},
		{"2g.20gb", 14, 2, 2, 3, 32, 2, 20096, "{0,2,4}:2"},
		{"3g.40gb", 9, 3, 4, 2, 60, 3, 40448, "{0,4}:4"},
		{"4g.40gb", 5, 4, 4, 1, 64, 4, 40448, "{0}:4"},
		{"7g.80gb", 0, 7, 8, 1, 132, 8, 81152, "{0}:8"},
	},
	"h200-141gb": {
		{"1g.18gb", 19, 1, 1, 7, 16, 1, 16384, "{0,1,2,3,4,5,6}:1"},
		{"1g.18gb+me", 20, 1, 1, 1, 16, 1, 16384, "{0,1,2,3,4,5,6}:1"},
		{"1g.35gb", 15, 1, 2, 4, 26, 1, 33280, "{0,2,4,6}:2"},
		{"2g.35gb", 14, 2, 2, 3, 32, 2, 33280, "{0,2,4}:2"},
		{"3g.71gb", 9, 3, 4, 2, 60, 3, 71424, "{0,4}:4"},
		{"4g.71gb", 5, 4, 4, 1, 64, 4, 71424, "{0}:4"},
		{"7g.141gb", 0, 7, 8, 1, 132, 8, 143360, "{0}:8"},
	},
}

var migCards = map[string]struct{ product, memory string }{
	"a100-40gb":  {"NVIDIA A100-SXM4-40GB", "40Gi"},
	"a100-80gb":  {"NVIDIA A100-SXM4-80GB", "80Gi"},
	"h100-80gb":  {"NVIDIA H100 80GB HBM3", "80Gi"},
	"h200-141gb": {"NVIDIA H200", "141Gi"},
}

func placementString(ps []nvml.GpuInstancePlacement) string {
	starts := make([]string, len(ps))
	size := -1
	for i, p := range ps {
		starts[i] = fmt.Sprint(p.Start)
		if size != -1 && int(p.Size) != size {
			return fmt.Sprintf("mixed sizes %v", ps)
		}
		size = int(p.Size)
	}
	return fmt.Sprintf("{%s}:%d", strings.Join(starts, ","), size)
}

// TestMIGProfilesFollowTheGuide: each card type offers, through go-nvml,
// exactly the guide's profiles, by enumerating NVML profile values from 0
// until INVALID_ARGUMENT as nvml.h says to.
func TestMIGProfilesFollowTheGuide(t *testing.T) {
	for migType, want := range guideTables {
		t.Run(migType, func(t *testing.T) {
			card := migCards[migType]
			lib, _ := serve(t, migCard(t, migType, card.product, card.memory, "enabled"))
			dev, ret := lib.DeviceGetHandleByIndex(0)
			ok(t, "DeviceGetHandleByIndex", ret)
			got := map[string]guideProfile{}
			for profile := 0; ; profile++ {
				info, ret := dev.GetGpuInstanceProfileInfoV(profile).V2()
				if ret == nvml.ERROR_INVALID_ARGUMENT {
					if profile != nvml.GPU_INSTANCE_PROFILE_COUNT {
						t.Errorf("INVALID_ARGUMENT from profile %d, want it from NVML_GPU_INSTANCE_PROFILE_COUNT (%d)", profile, nvml.GPU_INSTANCE_PROFILE_COUNT)
					}
					break
				}
				if ret == nvml.ERROR_NOT_SUPPORTED {
					continue
				}
				ok(t, fmt.Sprintf("GetGpuInstanceProfileInfoV(%d)", profile), ret)
				name, found := strings.CutPrefix(cstr(info.Name[:]), "MIG ")
				if !found {
					t.Errorf("profile %d name %q lacks the MIG prefix", profile, cstr(info.Name[:]))
				}
				v1, ret := dev.GetGpuInstanceProfileInfo(profile)
				ok(t, fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", profile), ret)
				if want := (nvml.GpuInstanceProfileInfo{Id: info.Id, IsP2pSupported: info.IsP2pSupported, SliceCount: info.SliceCount,
					InstanceCount: info.InstanceCount, MultiprocessorCount: info.MultiprocessorCount, CopyEngineCount: info.CopyEngineCount,
					DecoderCount: info.DecoderCount, EncoderCount: info.EncoderCount, JpegCount: info.JpegCount, OfaCount: info.OfaCount,
					MemorySizeMB: info.MemorySizeMB}); v1 != want {
					t.Errorf("profile %d: GetGpuInstanceProfileInfo %+v differs from the V2 answer %+v", profile, v1, want)
				}
				placements, ret := dev.GetGpuInstancePossiblePlacements(&v1)
				ok(t, "GetGpuInstancePossiblePlacements "+name, ret)
				memSlices := 0
				if len(placements) > 0 {
					memSlices = int(placements[0].Size)
				}
				got[name] = guideProfile{name, int(info.Id), int(info.SliceCount), memSlices, int(info.InstanceCount),
					int(info.MultiprocessorCount), int(info.CopyEngineCount), info.MemorySizeMB, placementString(placements)}
			}
			if len(got) != len(want) {
				t.Errorf("%d profiles %v, want the guide's %d", len(got), got, len(want))
			}
			for _, w := range want {
				if g, found := got[w.name]; !found {
					t.Errorf("profile %s missing", w.name)
				} else if g != w {
					t.Errorf("profile %s = %+v, want the guide's %+v", w.name, g, w)
				}
			}
		})
	}
}

// TestMIGNeedsTheMode: NVML answers each MIG call on a MIG-capable card
// whose mode is off as nvml.h says (the profile queries as the real driver
// did), and on a card without MIG.
func TestMIGNeedsTheMode(t *testing.T) {
	p := migCard(t, "h100-80gb", "NVIDIA H100 80GB HBM3", "80Gi", "disabled")
	l4 := p.GPUs[0]
	l4.Index, l4.ProductName, l4.Memory, l4.PCIBusID, l4.MIGType, l4.MIGMode = 1, "NVIDIA L4", "24Gi", "0000:2b:00.0", "", ""
	p.GPUs = append(p.GPUs, l4)
	lib, _ := serve(t, p)
	off, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, "DeviceGetHandleByIndex", ret)
	none, ret := lib.DeviceGetHandleByIndex(1)
	ok(t, "DeviceGetHandleByIndex", ret)

	if cur, pending, ret := off.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE || pending != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("GetMigMode = %d/%d %v, want disabled/disabled", cur, pending, ret)
	}
	info, ret := off.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if ret != nvml.SUCCESS || info.Id != 9 {
		t.Errorf("GetGpuInstanceProfileInfo with MIG off = %+v %v, want profile 9 (the card supports MIG)", info, ret)
	}
	// The profile queries answer with MIG mode off, as an H200 on r580
	// did (docs/gpu-reports/2026-11-27-h200-r580-experiments.md), v3's
	// name empty then.
	if v2, ret := off.GetGpuInstanceProfileInfoV(nvml.GPU_INSTANCE_PROFILE_3_SLICE).V2(); ret != nvml.SUCCESS || v2.Id != 9 || v2.MemorySizeMB != 40448 {
		t.Errorf("GetGpuInstanceProfileInfoV v2 with MIG off = %+v %v, want profile 9 of 40448 MiB", v2, ret)
	}
	if v3, ret := off.GetGpuInstanceProfileInfoV(nvml.GPU_INSTANCE_PROFILE_3_SLICE).V3(); ret != nvml.SUCCESS || v3.Id != 9 || cstr(v3.Name[:]) != "" {
		t.Errorf("GetGpuInstanceProfileInfoV v3 with MIG off = id %d name %q %v, want profile 9 with an empty name", v3.Id, cstr(v3.Name[:]), ret)
	}
	for what, got := range map[string]nvml.Return{
		"CreateGpuInstanceWithPlacement": second(off.CreateGpuInstanceWithPlacement(&info,
			&nvml.GpuInstancePlacement{Start: 0, Size: 4})),
		"GetGpuInstances":                          second(off.GetGpuInstances(&info)),
		"GetMigDeviceHandleByIndex":                second(off.GetMigDeviceHandleByIndex(0)),
		"no MIG: GetMigMode":                       third(none.GetMigMode()),
		"no MIG: GetGpuInstanceProfileInfo":        second(none.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)),
		"no MIG: GetGpuInstancePossiblePlacements": second(none.GetGpuInstancePossiblePlacements(&info)),
	} {
		if got != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s = %v, want ERROR_NOT_SUPPORTED", what, got)
		}
	}
	if ps, ret := off.GetGpuInstancePossiblePlacements(&info); ret != nvml.SUCCESS || placementString(ps) != "{0,4}:4" {
		t.Errorf("GetGpuInstancePossiblePlacements with MIG off = %v %v, want {0,4}:4 (regardless of the mode)", ps, ret)
	}
	if n, ret := off.GetMaxMigDeviceCount(); ret != nvml.SUCCESS || n != 0 {
		t.Errorf("GetMaxMigDeviceCount with MIG off = %d %v, want 0", n, ret)
	}
	if _, ret := off.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_COUNT); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetGpuInstanceProfileInfo(COUNT) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
}

func second[A any](_ A, r nvml.Return) nvml.Return        { return r }
func third[A, B any](_ A, _ B, r nvml.Return) nvml.Return { return r }

// TestMIGInstances: create and destroy GPU and compute instances, the
// failures nvml.h documents, MIG device handles, and the mode switches.
func TestMIGInstances(t *testing.T) {
	lib, state := serve(t, migCard(t, "h100-80gb", "NVIDIA H100 80GB HBM3", "80Gi", "disabled"))
	uuid := fakegpu.FakeGPUUUID(node, 0)
	if err := state.SetMigModes(uuid, false, true); err != nil {
		t.Fatal(err)
	}
	dev, ret := lib.DeviceGetHandleByIndex(0)
	ok(t, "DeviceGetHandleByIndex", ret)
	if cur, pending, ret := dev.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_DISABLE || pending != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("GetMigMode after enabling without reset = %d/%d %v, want disabled/enabled", cur, pending, ret)
	}
	if err := state.SetMigMode(uuid, true); err != nil {
		t.Fatal(err)
	}
	profile := func(p int) nvml.GpuInstanceProfileInfo {
		t.Helper()
		info, ret := dev.GetGpuInstanceProfileInfo(p)
		ok(t, "GetGpuInstanceProfileInfo", ret)
		return info
	}
	p3, p4, p1, p1me := profile(nvml.GPU_INSTANCE_PROFILE_3_SLICE), profile(nvml.GPU_INSTANCE_PROFILE_4_SLICE),
		profile(nvml.GPU_INSTANCE_PROFILE_1_SLICE), profile(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
	create := func(info nvml.GpuInstanceProfileInfo, start uint32) (nvml.GpuInstance, nvml.Return) {
		ps, ret := dev.GetGpuInstancePossiblePlacements(&info)
		ok(t, "GetGpuInstancePossiblePlacements", ret)
		return dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: start, Size: ps[0].Size})
	}

	gi3, ret := create(p3, 0)
	ok(t, "create 3g.40gb at 0", ret)
	giInfo, ret := gi3.GetInfo()
	ok(t, "GpuInstance GetInfo", ret)
	if giInfo.Id != 1 || giInfo.ProfileId != 9 || giInfo.Placement != (nvml.GpuInstancePlacement{Start: 0, Size: 4}) {
		t.Errorf("3g.40gb at 0: %+v, want GPU instance 1, profile 9, placement {0 4}", giInfo)
	}
	for _, tt := range []struct {
		what string
		info nvml.GpuInstanceProfileInfo
		at   uint32
		want nvml.Return
	}{
		{"4g.40gb over the 3g.40gb (placement taken)", p4, 0, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"1g.10gb inside the 3g.40gb (placement taken)", p1, 2, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"3g.40gb at 2 (not a placement of the profile)", p3, 2, nvml.ERROR_INVALID_ARGUMENT},
		{"1g.10gb+me at 4", p1me, 4, nvml.SUCCESS},
		{"a second 1g.10gb+me (out of resources: one per card)", p1me, 5, nvml.ERROR_INSUFFICIENT_RESOURCES},
		{"1g.10gb at 5", p1, 5, nvml.SUCCESS},
	} {
		if _, ret := create(tt.info, tt.at); ret != tt.want {
			t.Errorf("%s: %v, want %v", tt.what, ret, tt.want)
		}
	}
	if gis, ret := dev.GetGpuInstances(&p3); ret != nvml.SUCCESS || len(gis) != 1 {
		t.Errorf("GetGpuInstances(3g.40gb) = %d %v, want 1", len(gis), ret)
	}

	ciInfo, ret := gi3.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	ok(t, "GetComputeInstanceProfileInfo 3c", ret)
	if ciInfo.SliceCount != 3 || ciInfo.MultiprocessorCount != 60 || ciInfo.InstanceCount != 1 {
		t.Errorf("3c of a 3g.40gb = %+v, want 3 slices, 60 SMs, 1 instance", ciInfo)
	}
	if _, ret := gi3.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("4c of a 3g GPU instance: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	ci, ret := gi3.CreateComputeInstance(&ciInfo)
	ok(t, "CreateComputeInstance", ret)
	if _, ret := gi3.CreateComputeInstance(&ciInfo); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("a second 3c in a 3g: %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}

	if n, ret := dev.GetMaxMigDeviceCount(); ret != nvml.SUCCESS || n != 7 {
		t.Errorf("GetMaxMigDeviceCount = %d %v, want 7", n, ret)
	}
	mig, ret := dev.GetMigDeviceHandleByIndex(0)
	ok(t, "GetMigDeviceHandleByIndex(0)", ret)
	migUUID, ret := mig.GetUUID()
	ok(t, "MIG device GetUUID", ret)
	if !strings.HasPrefix(migUUID, "MIG-") || len(migUUID) != len("MIG-")+36 {
		t.Errorf("MIG device UUID %q, want MIG-<uuid>", migUUID)
	}
	if is, ret := mig.IsMigDeviceHandle(); ret != nvml.SUCCESS || !is {
		t.Errorf("IsMigDeviceHandle(MIG device) = %v %v, want true", is, ret)
	}
	if is, ret := dev.IsMigDeviceHandle(); ret != nvml.SUCCESS || is {
		t.Errorf("IsMigDeviceHandle(card) = %v %v, want false", is, ret)
	}
	if id, ret := mig.GetGpuInstanceId(); ret != nvml.SUCCESS || id != 1 {
		t.Errorf("MIG device GetGpuInstanceId = %d %v, want 1", id, ret)
	}
	if id, ret := mig.GetComputeInstanceId(); ret != nvml.SUCCESS || id != 0 {
		t.Errorf("MIG device GetComputeInstanceId = %d %v, want 0", id, ret)
	}
	if parent, ret := mig.GetDeviceHandleFromMigDeviceHandle(); ret != nvml.SUCCESS || parent != dev {
		t.Errorf("GetDeviceHandleFromMigDeviceHandle = %v %v, want the card", parent, ret)
	}
	// nvml.h: GetHandleByUUID takes "the UUID of the target GPU or MIG
	// instance" and answers "the device handle or MIG device handle".
	byUUID, ret := lib.DeviceGetHandleByUUID(migUUID)
	ok(t, "DeviceGetHandleByUUID(MIG UUID)", ret)
	if is, ret := byUUID.IsMigDeviceHandle(); ret != nvml.SUCCESS || !is {
		t.Errorf("IsMigDeviceHandle(handle of the MIG UUID) = %v %v, want true", is, ret)
	}
	if got, ret := byUUID.GetUUID(); ret != nvml.SUCCESS || got != migUUID {
		t.Errorf("GetUUID(handle of the MIG UUID) = %q %v, want %q", got, ret, migUUID)
	}
	if id, ret := byUUID.GetGpuInstanceId(); ret != nvml.SUCCESS || id != 1 {
		t.Errorf("GetGpuInstanceId(handle of the MIG UUID) = %d %v, want 1", id, ret)
	}
	if parent, ret := byUUID.GetDeviceHandleFromMigDeviceHandle(); ret != nvml.SUCCESS || parent != dev {
		t.Errorf("GetDeviceHandleFromMigDeviceHandle(handle of the MIG UUID) = %v %v, want the card", parent, ret)
	}
	if card, ret := lib.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS || card != dev {
		t.Errorf("DeviceGetHandleByUUID(card UUID) = %v %v, want the card", card, ret)
	}
	if _, ret := lib.DeviceGetHandleByUUID("MIG-00000000-0000-5000-8000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("DeviceGetHandleByUUID(unknown MIG UUID) = %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := dev.GetMigDeviceHandleByIndex(1); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetMigDeviceHandleByIndex(1) with one compute instance: %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := dev.GetMigDeviceHandleByIndex(7); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetMigDeviceHandleByIndex(7): %v, want ERROR_INVALID_ARGUMENT", ret)
	}

	if ret := gi3.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a GPU instance with a compute instance: %v, want ERROR_IN_USE", ret)
	}
	if err := state.SetMigDeviceBusy(migUUID, true); err != nil {
		t.Fatal(err)
	}
	if ret := ci.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a busy compute instance: %v, want ERROR_IN_USE", ret)
	}
	if err := state.SetMigDeviceBusy(migUUID, false); err != nil {
		t.Fatal(err)
	}
	ok(t, "destroying the idle compute instance", ci.Destroy())
	if _, ret := lib.DeviceGetHandleByUUID(migUUID); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("DeviceGetHandleByUUID of a destroyed compute instance's MIG UUID = %v, want ERROR_NOT_FOUND", ret)
	}
	ok(t, "destroying the empty GPU instance", gi3.Destroy())
	if _, ret := create(p4, 0); ret != nvml.SUCCESS {
		t.Errorf("4g.40gb at 0 once the 3g.40gb is gone: %v", ret)
	}

	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.String())
	}
	for _, want := range []string{
		"nvmlDeviceCreateGpuInstanceWithPlacement index=0 uuid=" + uuid + " profile=9 start=0 gi=1 result=0",
		"nvmlDeviceCreateGpuInstanceWithPlacement index=0 uuid=" + uuid + " profile=5 start=0 gi=-1 result=23",
		"nvmlGpuInstanceCreateComputeInstance index=0 uuid=" + uuid + " profile=2 gi=1 ci=0 result=0",
		"nvmlComputeInstanceDestroy index=0 uuid=" + uuid + " gi=1 ci=0 result=19",
		"nvmlGpuInstanceDestroy index=0 uuid=" + uuid + " gi=1 result=0",
	} {
		if !contains(got, want) {
			t.Errorf("calls.log lacks %q; has:\n%s", want, strings.Join(got, "\n"))
		}
	}

	// Turning the mode off (a reset) drops every instance.
	if err := state.SetMigMode(uuid, false); err != nil {
		t.Fatal(err)
	}
	if err := state.SetMigMode(uuid, true); err != nil {
		t.Fatal(err)
	}
	if gis, ret := dev.GetGpuInstances(&p4); ret != nvml.SUCCESS || len(gis) != 0 {
		t.Errorf("GetGpuInstances after a mode cycle = %d %v, want none", len(gis), ret)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

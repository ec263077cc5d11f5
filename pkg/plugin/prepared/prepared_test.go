package prepared

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
)

const pipeDir = "/var/lib/tangram/mps/pipe"

func TestMPSSharesAndCards(t *testing.T) {
	pct := int32(25)
	capped := &v1alpha1.GpuConfig{Sharing: &v1alpha1.Sharing{Backend: v1alpha1.BackendMPS, MPS: &v1alpha1.MPSSettings{DefaultActiveThreadPercentage: &pct}}}
	tests := []struct {
		name       string
		devices    []Device
		wantCards  []string
		wantShares []mps.Share
	}{
		{name: "whole card", devices: []Device{{GPUUUID: "GPU-0", MemoryBytes: 80 << 30}}},
		{name: "share with backend none: no pipe directory recorded", devices: []Device{{GPUUUID: "GPU-0", Share: true, MemoryBytes: 10 << 30}}},
		{name: "a pipe directory without a share is not MPS", devices: []Device{{GPUUUID: "GPU-0", MPSPipeDir: pipeDir}}},
		{
			name: "MPS shares: cards sorted and unique, compute wins over the default cap",
			devices: []Device{
				{GPUUUID: "GPU-1", Share: true, MPSPipeDir: pipeDir, MemoryBytes: 10 << 30, ComputePercent: 40, Config: capped},
				{GPUUUID: "GPU-0", Share: true, MPSPipeDir: pipeDir, MemoryBytes: 20 << 30, Config: capped},
				{GPUUUID: "GPU-1", Share: true, MPSPipeDir: pipeDir, MemoryBytes: 5 << 30},
			},
			wantCards: []string{"GPU-0", "GPU-1"},
			wantShares: []mps.Share{
				{Card: "GPU-1", MemoryBytes: 10 << 30, ThreadPercent: 40},
				{Card: "GPU-0", MemoryBytes: 20 << 30, ThreadPercent: 25},
				{Card: "GPU-1", MemoryBytes: 5 << 30},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Claim{UID: "u", Devices: tt.devices}
			if got := c.MPSCards(); !reflect.DeepEqual(got, tt.wantCards) {
				t.Errorf("MPSCards = %v, want %v", got, tt.wantCards)
			}
			if got := c.MPSShares(); !reflect.DeepEqual(got, tt.wantShares) {
				t.Errorf("MPSShares = %+v, want %+v", got, tt.wantShares)
			}
		})
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	cfg := v1alpha1.Default()
	orig := Claim{UID: "u", Devices: []Device{{Device: "gpu-0", CDIDeviceIDs: []string{"id"}, Config: cfg}}}
	cp := orig.DeepCopy()
	cp.Devices[0].Device = "changed"
	cp.Devices[0].CDIDeviceIDs[0] = "changed"
	cp.Devices[0].Config.Sharing.Backend = "changed"
	if orig.Devices[0].Device == "changed" || orig.Devices[0].CDIDeviceIDs[0] == "changed" || orig.Devices[0].Config.Sharing.Backend == "changed" {
		t.Errorf("the copy shares storage with the original: %+v", orig.Devices[0])
	}
}

// The UID is the checkpoint's map key, never a field of the entry: older
// plugins' files have no such field and must read the same.
func TestClaimJSONLeavesTheUIDToTheKey(t *testing.T) {
	raw, err := json.Marshal(Claim{UID: "u", State: PrepareCompleted, Namespace: "ml", Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"state":"PrepareCompleted","namespace":"ml","name":"c"}`; string(raw) != want {
		t.Errorf("JSON = %s, want %s", raw, want)
	}
	if strings.Contains(string(raw), `"u"`) {
		t.Errorf("the UID was written into the entry: %s", raw)
	}
}

// TestDeviceKind: each combination the plan records reads as one kind;
// admin access and a MIG placement win over the share flags, a share's
// backend is its recorded pipe directory.
func TestDeviceKind(t *testing.T) {
	for _, tt := range []struct {
		name string
		dev  Device
		want Kind
	}{
		{name: "whole card", dev: Device{Device: "gpu-0"}, want: KindWholeCard},
		{name: "admin access", dev: Device{Device: "gpu-0", AdminAccess: true}, want: KindAdminAccess},
		{name: "MIG partition", dev: Device{Device: "gpu-0-mig-19-0", MIG: &MIG{ProfileID: 19}}, want: KindMIGPartition},
		{name: "MPS share", dev: Device{Device: "gpu-0", Share: true, MPSPipeDir: "/mps/pipe"}, want: KindMPSShare},
		{name: "share without a backend", dev: Device{Device: "gpu-0", Share: true}, want: KindShare},
		{name: "a whole card never uses MPS", dev: Device{Device: "gpu-0", MPSPipeDir: "/mps/pipe"}, want: KindWholeCard},
	} {
		if got := tt.dev.Kind(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

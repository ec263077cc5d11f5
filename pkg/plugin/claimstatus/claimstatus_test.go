package claimstatus

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

const testNode = "node-a"

func TestDeviceStatuses(t *testing.T) {
	cards := map[string]gpu.GPU{
		"gpu-0": {Index: 0, UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30},
	}
	now := metav1.Now()
	dev := func(share, mps, admin bool, mem, compute int64) prepared.Device {
		d := prepared.Device{Request: "gpu", Device: "gpu-0", GPUUUID: "GPU-0", Share: share, AdminAccess: admin,
			MemoryBytes: mem, ComputePercent: compute}
		if mps {
			d.MPSPipeDir = "/var/lib/tangram/mps/pipe"
		}
		if share || admin {
			d.ShareID = "s1"
		}
		return d
	}
	tests := []struct {
		name          string
		dev           prepared.Device
		simulated     bool
		v3            bool
		level, reason string // the node's published shareEnforcement
		wantData      DeviceData
		wantEnforced  metav1.ConditionStatus
		wantReason    string
		wantShareIDOK bool
		wantMessage   []string // in the LimitsEnforced message
	}{
		{
			name: "whole card", dev: dev(false, false, false, 80<<30, 0),
			wantData:     DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "80Gi", MemoryBytes: 80 << 30, ComputePercent: 100, Enforcement: EnforcementExclusive},
			wantEnforced: metav1.ConditionTrue, wantReason: "WholeCard",
		},
		{
			name: "MPS share", dev: dev(true, true, false, 20<<30, 40),
			wantData:     DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, ComputePercent: 40, Share: true, Enforcement: EnforcementMPS},
			wantEnforced: metav1.ConditionTrue, wantReason: "MPSClientLimits", wantShareIDOK: true,
		},
		{
			name: "MPS v3 share", dev: dev(true, true, false, 20<<30, 40), v3: true,
			wantData:     DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, ComputePercent: 40, Share: true, Enforcement: EnforcementMPS},
			wantEnforced: metav1.ConditionTrue, wantReason: "MPSNamespace", wantShareIDOK: true,
		},
		{
			name: "MPS share on fake GPUs", dev: dev(true, true, false, 20<<30, 0), simulated: true,
			wantData:     DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, Share: true, Enforcement: EnforcementSimulated},
			wantEnforced: metav1.ConditionFalse, wantReason: "SimulatedMPS", wantShareIDOK: true,
		},
		{
			name: "share with backend none", dev: dev(true, false, false, 10<<30, 0),
			wantData:     DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "10Gi", MemoryBytes: 10 << 30, Share: true, Enforcement: EnforcementNone},
			wantEnforced: metav1.ConditionFalse, wantReason: "AccountingOnly", wantShareIDOK: true,
		},
		// With the node's published level (every running plugin): only a
		// hard node's share is enforced.
		{
			name: "classic MPS share on an advisory node (r535-r580)", dev: dev(true, true, false, 20<<30, 40),
			level: "advisory", reason: device.ReasonDriverBefore615,
			wantData: DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, ComputePercent: 40, Share: true, Enforcement: EnforcementMPS,
				ShareEnforcement: "advisory", ShareEnforcementReason: device.ReasonDriverBefore615},
			wantEnforced: metav1.ConditionFalse, wantReason: ReasonAdvisory, wantShareIDOK: true,
			wantMessage: []string{"advisory", "can unset", device.ShareEnforcementReasonText(device.ReasonDriverBefore615), device.HardSharedDeviceClassName},
		},
		{
			name: "MPS v3 share on a compute-only node", dev: dev(true, true, false, 20<<30, 40), v3: true,
			level: "compute-only", reason: device.ReasonDmemNotEnabled,
			wantData: DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, ComputePercent: 40, Share: true, Enforcement: EnforcementMPS,
				ShareEnforcement: "compute-only", ShareEnforcementReason: device.ReasonDmemNotEnabled},
			wantEnforced: metav1.ConditionFalse, wantReason: ReasonComputeOnly, wantShareIDOK: true,
			wantMessage: []string{"memory is not limited per pod", device.HardSharedDeviceClassName},
		},
		{
			name: "MPS v3 share on a hard node", dev: dev(true, true, false, 20<<30, 40), v3: true, level: "hard",
			wantData: DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, ComputePercent: 40, Share: true, Enforcement: EnforcementMPS,
				ShareEnforcement: "hard"},
			wantEnforced: metav1.ConditionTrue, wantReason: ReasonHard, wantShareIDOK: true,
		},
		{
			name: "share on fake GPUs", dev: dev(true, true, false, 20<<30, 0), simulated: true,
			level: "advisory", reason: device.ReasonFakeGPUs,
			wantData: DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "20Gi", MemoryBytes: 20 << 30, Share: true, Enforcement: EnforcementSimulated,
				ShareEnforcement: "advisory", ShareEnforcementReason: device.ReasonFakeGPUs},
			wantEnforced: metav1.ConditionFalse, wantReason: ReasonAdvisory, wantShareIDOK: true,
			wantMessage: []string{"fake GPUs"},
		},
		{
			name: "backend none on a hard node", dev: dev(true, false, false, 10<<30, 0), level: "hard",
			wantData: DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "10Gi", MemoryBytes: 10 << 30, Share: true, Enforcement: EnforcementNone,
				ShareEnforcement: "hard"},
			wantEnforced: metav1.ConditionFalse, wantReason: ReasonAccountingOnly, wantShareIDOK: true,
		},
		{
			name: "admin access", dev: dev(false, false, true, 0, 0),
			wantData:     DeviceData{UUID: "GPU-0", PCIBusID: "0000:1b:00.0", ProductName: "NVIDIA H100 80GB HBM3", Memory: "80Gi", MemoryBytes: 80 << 30, ComputePercent: 100, Enforcement: EnforcementAdminAccess},
			wantEnforced: metav1.ConditionTrue, wantReason: "AdminAccess", wantShareIDOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := prepared.Claim{UID: "u", Namespace: "ml", Name: "c", State: prepared.PrepareCompleted, Devices: []prepared.Device{tt.dev}}
			got, err := DeviceStatuses(rec, testNode, cards, Node{Simulated: tt.simulated, V3: tt.v3, Level: tt.level, Reason: tt.reason}, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("got %d entries, want 1", len(got))
			}
			st := got[0]
			if st.Driver != device.DriverName || st.Pool != testNode || st.Device != "gpu-0" || (st.ShareID != nil) != tt.wantShareIDOK {
				t.Errorf("entry key = %s/%s/%s share %v", st.Driver, st.Pool, st.Device, st.ShareID)
			}
			var data DeviceData
			if err := json.Unmarshal(st.Data.Raw, &data); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(data, tt.wantData) {
				t.Errorf("data\n got %+v\nwant %+v", data, tt.wantData)
			}
			if len(st.Data.Raw) > resourceapi.AllocatedDeviceStatusDataMaxLength {
				t.Errorf("data is %d bytes, over the API's limit", len(st.Data.Raw))
			}
			conds := map[string]metav1.Condition{}
			for _, c := range st.Conditions {
				conds[c.Type] = c
			}
			if c := conds[ConditionReady]; c.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %q, want True", c.Status)
			}
			if c := conds[ConditionLimitsEnforced]; c.Status != tt.wantEnforced || c.Reason != tt.wantReason {
				t.Errorf("LimitsEnforced = %q/%q, want %q/%q", c.Status, c.Reason, tt.wantEnforced, tt.wantReason)
			}
			for _, want := range tt.wantMessage {
				if c := conds[ConditionLimitsEnforced]; !strings.Contains(c.Message, want) {
					t.Errorf("LimitsEnforced message %q does not say %q", c.Message, want)
				}
			}
		})
	}
}

// API applies our entries and leaves other drivers' alone.
func TestAPI(t *testing.T) {
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c"},
		Status: resourceapi.ResourceClaimStatus{Devices: []resourceapi.AllocatedDeviceStatus{
			{Driver: "net.example.com", Pool: "p", Device: "eth0"},
		}},
	}
	client := fake.NewClientset(claim)
	w := API{Client: client}
	ours := []resourceapi.AllocatedDeviceStatus{{Driver: device.DriverName, Pool: testNode, Device: "gpu-0", ShareID: ptr.To("s1"),
		Conditions: []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Prepared", LastTransitionTime: metav1.Now()}}}}
	if err := w.SetDevices(ctx, "ml", "c", ours); err != nil {
		t.Fatal(err)
	}
	got, err := client.ResourceV1().ResourceClaims("ml").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var devices []string
	for _, d := range got.Status.Devices {
		devices = append(devices, d.Driver+"/"+d.Device)
	}
	if want := []string{"net.example.com/eth0", device.DriverName + "/gpu-0"}; !reflect.DeepEqual(devices, want) {
		t.Errorf("status.devices = %v, want %v", devices, want)
	}
	if err := w.SetDevices(ctx, "ml", "gone", ours); err != nil {
		t.Errorf("a deleted claim: %v, want no error", err)
	}
}

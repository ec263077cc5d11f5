package prepared

import (
	"reflect"
	"testing"
)

const testPool = "node-a"

// The kubelet gets the claim-wide CDI device last, tied to a request name no
// request can have, and only for claims of several requests.
func TestKubeletDevicesClaimWideEntry(t *testing.T) {
	dev := func(request, device string) Device {
		return Device{Request: request, Device: device, CDIDeviceIDs: []string{"k8s.gpu.tangram.dev/claim=u-" + device}}
	}
	tests := []struct {
		name     string
		devices  []Device
		wantLast []string // Requests of the last entry
		wantLen  int
	}{
		{name: "one request", devices: []Device{dev("gpus", "gpu-0"), dev("gpus", "gpu-1")}, wantLast: []string{"gpus"}, wantLen: 2},
		{name: "two requests", devices: []Device{dev("left", "gpu-0"), dev("right", "gpu-1")}, wantLast: []string{ClaimWideRequest}, wantLen: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Claim{UID: "u", Devices: tt.devices}.KubeletDevices(testPool)
			if len(got) != tt.wantLen {
				t.Fatalf("%d entries, want %d: %+v", len(got), tt.wantLen, got)
			}
			last := got[len(got)-1]
			if !reflect.DeepEqual(last.Requests, tt.wantLast) {
				t.Errorf("last entry requests = %v, want %v", last.Requests, tt.wantLast)
			}
			if tt.wantLen == 3 {
				if want := []string{"k8s.gpu.tangram.dev/claim=u-claim"}; !reflect.DeepEqual(last.CDIDeviceIDs, want) || last.PoolName != testPool || last.DeviceName != "gpu-1" {
					t.Errorf("claim-wide entry = %+v, want IDs %v on %s/gpu-1", last, want, testPool)
				}
			}
		})
	}
}

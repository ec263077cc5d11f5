package plugin

import (
	"context"
	"reflect"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// recordingStatus remembers what the driver wrote, by claim.
type recordingStatus struct {
	mu     sync.Mutex
	claims map[string][]resourceapi.AllocatedDeviceStatus
}

func (r *recordingStatus) SetDevices(_ context.Context, ns, name string, devices []resourceapi.AllocatedDeviceStatus) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claims == nil {
		r.claims = map[string][]resourceapi.AllocatedDeviceStatus{}
	}
	r.claims[ns+"/"+name] = devices
	return nil
}

func TestPrepareWritesAndUnprepareClearsDeviceStatus(t *testing.T) {
	h := newHarness(t)
	rs := &recordingStatus{}
	h.driver.cfg.ClaimStatus = rs
	claim := claimWith("c1", wholeResult("a", "gpu-0"), shareResult("b", "gpu-1", "s1", "20Gi", "40"))
	if err := h.prepare(claim)[claim.UID].Err; err != nil {
		t.Fatal(err)
	}
	key := claim.Namespace + "/" + claim.Name
	var devices []string
	for _, st := range rs.claims[key] {
		devices = append(devices, st.Device)
	}
	if want := []string{"gpu-0", "gpu-1"}; !reflect.DeepEqual(devices, want) {
		t.Fatalf("status written for %v, want %v", devices, want)
	}
	if err := h.unprepare("c1")["c1"]; err != nil {
		t.Fatal(err)
	}
	if got, ok := rs.claims[key]; !ok || len(got) != 0 {
		t.Errorf("after unprepare status = %v, want cleared", got)
	}
}

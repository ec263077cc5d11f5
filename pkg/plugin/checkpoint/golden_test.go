package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// goldenA1512ea was written by the plugin at commit a1512ea, before the
// plugin's records became the file's types (testdata/README.md). During a
// rolling update the old and the new plugin pod share the file, and a
// downgrade reads what the new one wrote: it must load into the records
// and save back to the same bytes.
const goldenA1512ea = "testdata/checkpoint-a1512ea.json"

func TestGoldenFileOfEarlierPluginRoundTrips(t *testing.T) {
	old, err := os.ReadFile(goldenA1512ea)
	if err != nil {
		t.Fatal(err)
	}
	const boot = "11111111-2222-3333-4444-555555555555"
	bootID := func() (string, error) { return boot, nil }
	res, err := NewStore(goldenA1512ea, WithBootID(bootID)).Load()
	if err != nil || res.Corrupt != nil || res.Missing || res.PreviousBootID != "" {
		t.Fatalf("Load: err %v, corrupt %v, missing %v, previous boot %q", err, res.Corrupt, res.Missing, res.PreviousBootID)
	}
	claims := res.Checkpoint.Claims
	tests := []struct {
		uid          string
		state        prepared.State
		devices      int
		wantMPSCards []string
		wantShares   []bool
	}{
		{uid: "uid-a", state: prepared.PrepareCompleted, devices: 2, wantMPSCards: []string{"GPU-1"}, wantShares: []bool{true, false}},
		{uid: "uid-b", state: prepared.PrepareStarted, devices: 1, wantShares: []bool{false}},
		{uid: "uid-c", state: prepared.PrepareCompleted, devices: 1, wantShares: []bool{true}},
		{uid: "uid-d", state: prepared.PrepareCompleted, devices: 1, wantShares: []bool{false}},
	}
	if len(claims) != len(tests) {
		t.Fatalf("loaded %d claims, want %d", len(claims), len(tests))
	}
	for _, tt := range tests {
		c := claims[tt.uid]
		if c.UID != tt.uid || c.State != tt.state || len(c.Devices) != tt.devices {
			t.Errorf("claim %s: UID %q state %q devices %d, want %s %s %d", tt.uid, c.UID, c.State, len(c.Devices), tt.uid, tt.state, tt.devices)
			continue
		}
		if got := c.MPSCards(); len(got) != len(tt.wantMPSCards) || (len(got) > 0 && got[0] != tt.wantMPSCards[0]) {
			t.Errorf("claim %s: MPS cards %v, want %v", tt.uid, got, tt.wantMPSCards)
		}
		for i, want := range tt.wantShares {
			if c.Devices[i].Share != want || c.Devices[i].Config == nil && tt.uid != "uid-d" {
				t.Errorf("claim %s device %d: share %v config %v, want share %v and a config", tt.uid, i, c.Devices[i].Share, c.Devices[i].Config, want)
			}
		}
	}
	if ids := claims["uid-a"].Devices[0].CDIDeviceIDs; len(ids) != 1 || ids[0] != "k8s.gpu.tangram.dev/claim=uid-a-gpu-1-share-1" {
		t.Errorf("CDI device IDs = %v", ids)
	}

	resaved := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := NewStore(resaved, WithBootID(bootID)).Save(res.Checkpoint); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(resaved)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, old) {
		t.Errorf("saved file differs from the one the earlier plugin wrote\n got: %s\nwant: %s", got, old)
	}
}

// TestMIGRecordRoundTrips: a record of a MIG partition, intent only and
// created, is stored in the same v1 file (the mig field is new and
// omitempty, so the pinned file above is unchanged and an older plugin
// ignores it) and loads back equal.
func TestMIGRecordRoundTrips(t *testing.T) {
	gi, ci := 2, 0
	cp := New()
	cp.Claims["uid-m"] = prepared.Claim{UID: "uid-m", State: prepared.PrepareCompleted, Namespace: "ns", Name: "m", Devices: []prepared.Device{
		{Request: "small", Device: "gpu-3-mig-19-0", GPUUUID: "GPU-3", MemoryBytes: 9856 << 20, CDIDeviceIDs: []string{"k8s.gpu.tangram.dev/claim=uid-m-gpu-3-mig-19-0"},
			MIG: &prepared.MIG{ParentIndex: 3, ProfileID: 19, Profile: "1g.10gb", Start: 0, Size: 1, GPUInstanceID: &gi, ComputeInstanceID: &ci, UUID: "MIG-1"}},
	}}
	cp.Claims["uid-i"] = prepared.Claim{UID: "uid-i", State: prepared.PrepareStarted, Namespace: "ns", Name: "i", Devices: []prepared.Device{
		{Request: "large", Device: "gpu-3-mig-9-4", GPUUUID: "GPU-3", MIG: &prepared.MIG{ParentIndex: 3, ProfileID: 9, Profile: "3g.40gb", Start: 4, Size: 4}},
	}}
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	bootID := WithBootID(func() (string, error) { return "boot", nil })
	if err := NewStore(path, bootID).Save(cp); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"version":"v1"`)) || !bytes.Contains(raw, []byte(`"mig":{"parentIndex":3,"profileID":19,"profile":"1g.10gb","start":0,"size":1,"gpuInstanceID":2,"computeInstanceID":0,"uuid":"MIG-1"}`)) {
		t.Errorf("stored file %s lacks the v1 version or the MIG record", raw)
	}
	res, err := NewStore(path, bootID).Load()
	if err != nil || res.Corrupt != nil {
		t.Fatal(err, res.Corrupt)
	}
	for uid, want := range cp.Claims {
		got := res.Checkpoint.Claims[uid]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("claim %s loaded %+v (MIG %+v), want %+v", uid, got, got.Devices[0].MIG, want)
		}
	}
}

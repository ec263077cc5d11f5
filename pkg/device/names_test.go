package device

import "testing"

func TestDeviceNames(t *testing.T) {
	if got := CardDeviceName(3); got != "gpu-3" {
		t.Errorf("CardDeviceName(3) = %q", got)
	}
	if got := MIGDeviceName(1, 19, 6); got != "gpu-1-mig-19-6" {
		t.Errorf("MIGDeviceName(1, 19, 6) = %q", got)
	}
	cases := []struct {
		name    string
		want    DeviceRef
		wantErr bool
	}{
		{"gpu-0", DeviceRef{Index: 0}, false},
		{"gpu-12", DeviceRef{Index: 12}, false},
		{"gpu-1-mig-19-6", DeviceRef{Index: 1, MIG: &MIGRef{ProfileID: 19, Start: 6}}, false},
		{"gpu-7-mig-0-0", DeviceRef{Index: 7, MIG: &MIGRef{ProfileID: 0, Start: 0}}, false},
		{"gpu-", DeviceRef{}, true},
		{"gpu-01", DeviceRef{}, true},
		{"gpu--1", DeviceRef{}, true},
		{"cpu-0", DeviceRef{}, true},
		{"gpu-0-mig-19", DeviceRef{}, true},
		{"gpu-0-mig-19-x", DeviceRef{}, true},
		{"gpu-0-mig-19-3-1", DeviceRef{}, true},
	}
	for _, c := range cases {
		got, err := ParseDeviceName(c.name)
		if (err != nil) != c.wantErr {
			t.Errorf("%s: error %v, want error %v", c.name, err, c.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got.Index != c.want.Index || (got.MIG == nil) != (c.want.MIG == nil) || (got.MIG != nil && *got.MIG != *c.want.MIG) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	// Names round-trip.
	for _, n := range []string{CardDeviceName(5), MIGDeviceName(5, 9, 4)} {
		ref, err := ParseDeviceName(n)
		if err != nil {
			t.Fatal(err)
		}
		back := CardDeviceName(ref.Index)
		if ref.MIG != nil {
			back = MIGDeviceName(ref.Index, ref.MIG.ProfileID, ref.MIG.Start)
		}
		if back != n {
			t.Errorf("%s parsed and named again is %s", n, back)
		}
	}
}

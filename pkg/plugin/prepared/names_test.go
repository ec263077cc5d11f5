package prepared

import "testing"

const uid = "0b5e5a43-6b8e-4c16-9c7a-3d1d2b6f1a00"
const share1 = "5f1c9a62-3a0f-4f7e-8f1d-9f1b2a3c4d5e"

func TestCDIDeviceName(t *testing.T) {
	tests := []struct{ uid, device, share, want string }{
		{uid, "gpu-3", "", uid + "-gpu-3"},
		{uid, "gpu-3", share1, uid + "-gpu-3-" + share1},
		{"a/b c", "gpu-0", "x+y", "a_b_c-gpu-0-x_y"},
	}
	for _, tc := range tests {
		if got := CDIDeviceName(tc.uid, tc.device, tc.share); got != tc.want {
			t.Errorf("CDIDeviceName(%q, %q, %q) = %q, want %q", tc.uid, tc.device, tc.share, got, tc.want)
		}
	}
}

func TestNeedsClaimWideDevice(t *testing.T) {
	tests := []struct {
		requests []string
		want     bool
	}{
		{[]string{"gpu"}, false},
		{[]string{"gpu", "gpu"}, false},
		{[]string{"gpu/a100", "gpu/h100"}, false}, // subrequests of one request
		{[]string{"left", "right"}, true},
		{[]string{"gpu", "gpu/x", "other"}, true},
	}
	for _, tc := range tests {
		if got := NeedsClaimWideDevice(tc.requests); got != tc.want {
			t.Errorf("NeedsClaimWideDevice(%q) = %v, want %v", tc.requests, got, tc.want)
		}
	}
}

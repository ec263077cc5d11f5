package gpu

import "testing"

func TestNormalizePCIBusID(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "0000:18:00.0", want: "0000:18:00.0"},
		{in: "00000000:1B:00.0", want: "0000:1b:00.0"},
		{in: "00010000:C3:1f.7", want: "10000:c3:1f.7"},
		{in: "0000:18:00", wantErr: `"0000:18:00" is not a PCI bus ID (use domain:bus:device.function, e.g. "0000:18:00.0")`},
		{in: "000:18:00.0", wantErr: `"000:18:00.0" is not a PCI bus ID (use domain:bus:device.function, e.g. "0000:18:00.0")`},
		{in: "0000:18:3a.0", wantErr: `"0000:18:3a.0" is not a PCI bus ID: device 3a is above 1f`},
		{in: "", wantErr: `"" is not a PCI bus ID (use domain:bus:device.function, e.g. "0000:18:00.0")`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := NormalizePCIBusID(tt.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("NormalizePCIBusID(%q) = %q, %q; want %q, %q", tt.in, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

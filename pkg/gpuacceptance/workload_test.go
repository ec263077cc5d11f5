package gpuacceptance

import (
	"strings"
	"testing"
)

func TestParseAllocLog(t *testing.T) {
	tests := []struct {
		name    string
		log     string
		want    AllocResult
		wantErr string
	}{
		{
			name: "refused",
			log:  "some driver noise\ncuda-alloc: devices=1 total_mib=81559 free_mib=20000 allocated_mib=20224 refused=1 error=2\n",
			want: AllocResult{Devices: 1, TotalMiB: 81559, FreeMiB: 20000, AllocatedMiB: 20224, Refused: true, Error: 2},
		},
		{
			name: "all allocated",
			log:  "cuda-alloc: devices=2 total_mib=81559 free_mib=81000 allocated_mib=256 refused=0 error=0",
			want: AllocResult{Devices: 2, TotalMiB: 81559, FreeMiB: 81000, AllocatedMiB: 256},
		},
		{name: "driver missing", log: "cuda-alloc: cannot load the CUDA driver: libcuda.so.1: cannot open shared object file", wantErr: "cannot load the CUDA driver"},
		{name: "garbled number", log: "cuda-alloc: devices=1 total_mib=x free_mib=1 allocated_mib=1 refused=0 error=0", wantErr: "total_mib"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAllocLog(tc.log)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	whole := Expectation{Shape: WholeCard, TryMiB: 73403}
	share := Expectation{Shape: Share, TryMiB: 22528, ShareMiB: 20480}
	pair := Expectation{Shape: NVLinkPair, TryMiB: 256}
	tests := []struct {
		name   string
		e      Expectation
		r      AllocResult
		wantOK bool
	}{
		{name: "whole card gets it all", e: whole, r: AllocResult{Devices: 1, AllocatedMiB: 73403}, wantOK: true},
		{name: "whole card refused", e: whole, r: AllocResult{Devices: 1, AllocatedMiB: 40960, Refused: true}},
		{name: "whole card sees two devices", e: whole, r: AllocResult{Devices: 2, AllocatedMiB: 73403}},
		{name: "share refused within its share", e: share, r: AllocResult{Devices: 1, AllocatedMiB: 20480, Refused: true}, wantOK: true},
		{name: "share not enforced", e: share, r: AllocResult{Devices: 1, AllocatedMiB: 22528}},
		{name: "share refused only past its share", e: share, r: AllocResult{Devices: 1, AllocatedMiB: 20736, Refused: true}},
		{name: "pair sees both cards", e: pair, r: AllocResult{Devices: 2, AllocatedMiB: 256}, wantOK: true},
		{name: "pair sees one card", e: pair, r: AllocResult{Devices: 1, AllocatedMiB: 256}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Judge(tc.e, tc.r)
			if c.OK != tc.wantOK {
				t.Errorf("OK = %v, want %v (%+v)", c.OK, tc.wantOK, c)
			}
			if c.Card != string(tc.e.Shape) {
				t.Errorf("check names %q, want the shape %q", c.Card, tc.e.Shape)
			}
		})
	}
}

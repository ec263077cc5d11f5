package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestParseFakeProcesses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []string
		want    []gpu.Process
		wantErr string
	}{
		{name: "none: nothing runs", want: []gpu.Process{}},
		{name: "two, one not reported, one with its SM", in: []string{"GPU-a,4242,5Gi,60", "GPU-b,7,-1"},
			want: []gpu.Process{{Card: "GPU-a", GPUInstance: gpu.NoGPUInstance, PID: 4242, UsedBytes: 5 << 30, SMPercent: 60, SMKnown: true}, {Card: "GPU-b", GPUInstance: gpu.NoGPUInstance, PID: 7, UsedBytes: -1}}},
		{name: "SM above 100%", in: []string{"GPU-a,1,1Gi,101"}, wantErr: "not a percentage"},
		{name: "five fields", in: []string{"GPU-a,1,1Gi,5,6"}, wantErr: "want <card UUID>"},
		{name: "two fields", in: []string{"GPU-a,4242"}, wantErr: "want <card UUID>,<PID>,<memory used>"},
		{name: "no card", in: []string{",4242,1Gi"}, wantErr: "want <card UUID>"},
		{name: "a PID of 0", in: []string{"GPU-a,0,1Gi"}, wantErr: "not a number above 0"},
		{name: "memory in words", in: []string{"GPU-a,1,five gigs"}, wantErr: "not a size"},
		{name: "negative memory", in: []string{"GPU-a,1,-2Gi"}, wantErr: "not a size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFakeProcesses(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

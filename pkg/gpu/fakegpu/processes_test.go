package fakegpu

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

func TestProcessesFile(t *testing.T) {
	tests := []struct {
		name    string
		content *string
		want    []gpu.Process
		wantErr string
	}{
		{name: "no file: nothing runs", want: []gpu.Process{}},
		{name: "an empty list", content: strPtr("[]"), want: []gpu.Process{}},
		{name: "a process outside MIG, one in a GPU instance, one whose memory is not reported",
			content: strPtr(`[{"card":"GPU-a","pid":10,"usedBytes":1024,"smPercent":0},{"card":"GPU-b","pid":11,"usedBytes":2048,"gpuInstance":1},{"card":"GPU-a","pid":12,"usedBytes":-1,"mpsClient":true,"smPercent":45}]`),
			want: []gpu.Process{{Card: "GPU-a", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: 1024, SMKnown: true}, {Card: "GPU-b", GPUInstance: 1, PID: 11, UsedBytes: 2048},
				{Card: "GPU-a", GPUInstance: gpu.NoGPUInstance, PID: 12, UsedBytes: -1, MPSClient: true, SMPercent: 45, SMKnown: true}}},
		{name: "not JSON", content: strPtr("pid=10"), wantErr: "want a JSON array"},
		{name: "an unknown field", content: strPtr(`[{"card":"GPU-a","pid":10,"memory":5}]`), wantErr: `unknown field "memory"`},
		{name: "SM above 100%", content: strPtr(`[{"card":"GPU-a","pid":10,"usedBytes":5,"smPercent":140}]`), wantErr: "not between 0 and 100"},
		{name: "no PID", content: strPtr(`[{"card":"GPU-a","usedBytes":5}]`), wantErr: "entry 0 needs a card UUID and a PID above 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ProcessesFileName)
			if tt.content != nil {
				if err := os.WriteFile(path, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ProcessesFile{Path: path}.GPUProcesses(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GPUProcesses = %+v, %v; want %+v", got, err, tt.want)
			}
			// What WriteProcesses writes reads back the same.
			if err := WriteProcesses(path, got); err != nil {
				t.Fatal(err)
			}
			again, err := ProcessesFile{Path: path}.GPUProcesses(context.Background())
			if err != nil || !reflect.DeepEqual(again, tt.want) {
				t.Errorf("after WriteProcesses: %+v, %v; want %+v", again, err, tt.want)
			}
		})
	}
}

func strPtr(s string) *string { return &s }

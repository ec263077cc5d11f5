package trace

import (
	"errors"
	"strings"
	"testing"
)

func TestParseNodes(t *testing.T) {
	tests := []struct {
		name    string
		csv     string
		want    []Node
		wantErr string
	}{
		{
			name: "openb format",
			csv:  "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8,G2\n",
			want: []Node{{Name: "n0", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 2, Model: "P100"}, {Name: "n1", CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "G2"}},
		},
		{
			name: "columns in another order",
			csv:  "model,gpu,sn,memory_mib,cpu_milli\nT4,1,n0,1024,1000\n",
			want: []Node{{Name: "n0", CPUMilli: 1000, MemoryMiB: 1024, GPUs: 1, Model: "T4"}},
		},
		{name: "empty file", csv: "", wantErr: "nodes.csv:1: empty file"},
		{name: "missing column", csv: "sn,cpu_milli,gpu,model\nn0,1,1,T4\n", wantErr: `nodes.csv:1: column "memory_mib": missing from the header`},
		{name: "not a number", csv: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,T4\nn1,lots,1,1,T4\n", wantErr: `nodes.csv:3: column "cpu_milli": "lots" is not an integer`},
		{name: "negative cards", csv: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,-1,T4\n", wantErr: `nodes.csv:2: column "gpu": -1 is below the minimum 0`},
		{name: "short row", csv: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1\n", wantErr: "nodes.csv:2: 4 fields, the header has 5"},
		{name: "gpus without model", csv: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,\n", wantErr: `nodes.csv:2: column "model": a node with GPUs needs a model`},
		{name: "duplicate name", csv: "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,T4\nn0,1,1,1,T4\n", wantErr: `nodes.csv:3: column "sn": node "n0" already defined on line 2`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNodes(strings.NewReader(tc.csv), "nodes.csv")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				var pe *ParseError
				if !errors.As(err, &pe) {
					t.Fatalf("error %v is not a *ParseError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d nodes, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("node %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseTasks(t *testing.T) {
	const header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
	tests := []struct {
		name      string
		csv       string
		want      []Task
		wantMilli []int64
		wantErr   string
	}{
		{
			name: "shares, whole cards, cpu only, spec",
			csv: header + "p0,6000,12288,1,460,,LS\np1,88000,327680,8,1000,,LS\np2,4000,8192,0,0,,BE\n" +
				"p3,1000,1024,1,1000,V100M16|V100M32,LS\n",
			want: []Task{
				{Name: "p0", CPUMilli: 6000, MemoryMiB: 12288, NumGPU: 1, GPUMilli: 460},
				{Name: "p1", CPUMilli: 88000, MemoryMiB: 327680, NumGPU: 8, GPUMilli: 1000},
				{Name: "p2", CPUMilli: 4000, MemoryMiB: 8192},
				{Name: "p3", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 1000, GPUSpec: []string{"V100M16", "V100M32"}},
			},
			wantMilli: []int64{460, 8000, 0, 1000},
		},
		{
			name:      "multigpu50 format without gpu_spec",
			csv:       "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,2,1000\n",
			want:      []Task{{Name: "p0", CPUMilli: 1, MemoryMiB: 1, NumGPU: 2, GPUMilli: 1000}},
			wantMilli: []int64{2000},
		},
		{name: "share above a card", csv: header + "p0,1,1,1,1200,,LS\n", wantErr: `pods.csv:2: column "gpu_milli": 1200 is more than one card`},
		{name: "partial multi-card", csv: header + "p0,1,1,2,500,,LS\n", wantErr: `pods.csv:2: column "gpu_milli": a 2-card task must take whole cards`},
		{name: "milli without card", csv: header + "p0,1,1,0,300,,LS\n", wantErr: `pods.csv:2: column "gpu_milli": 300 milli-GPU with num_gpu 0`},
		{name: "float cpu", csv: header + "p0,1.5,1,0,0,,LS\n", wantErr: `pods.csv:2: column "cpu_milli": "1.5" is not an integer`},
		{name: "empty name", csv: header + ",1,1,0,0,,LS\n", wantErr: `pods.csv:2: column "name": empty task name`},
		{name: "broken quoting", csv: header + "p0,\"1,1,0,0,,LS\n", wantErr: "pods.csv:2:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTasks(strings.NewReader(tc.csv), "pods.csv")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d tasks, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i].Name != tc.want[i].Name || got[i].CPUMilli != tc.want[i].CPUMilli || got[i].MemoryMiB != tc.want[i].MemoryMiB ||
					got[i].NumGPU != tc.want[i].NumGPU || got[i].GPUMilli != tc.want[i].GPUMilli || strings.Join(got[i].GPUSpec, "|") != strings.Join(tc.want[i].GPUSpec, "|") {
					t.Errorf("task %d = %+v, want %+v", i, got[i], tc.want[i])
				}
				if m := got[i].RequestedMilliGPU(); m != tc.wantMilli[i] {
					t.Errorf("task %d requests %d milli-GPU, want %d", i, m, tc.wantMilli[i])
				}
			}
		})
	}
}

func TestArrival(t *testing.T) {
	tasks := []Task{
		{Name: "c", NumGPU: 1, GPUMilli: 500},
		{Name: "a", NumGPU: 1, GPUMilli: 1000},
		{Name: "b"},
		{Name: "d", NumGPU: 2, GPUMilli: 1000},
	}
	tests := []struct {
		name      string
		capacity  int64
		arrival   float64
		wantMin   int64 // requested milli must reach this
		wantCut   bool  // list longer than needed: fewer tasks than the list
		wantDupes bool
	}{
		{name: "extends the list to 130%", capacity: 4000, arrival: 1.3, wantMin: 5200, wantDupes: true},
		{name: "cuts a long list", capacity: 1000, arrival: 1.0, wantMin: 1000, wantCut: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Arrival(tasks, tc.capacity, 42, tc.arrival)
			if err != nil {
				t.Fatal(err)
			}
			var requested int64
			names := map[string]bool{}
			dupes := false
			for _, task := range got {
				requested += task.RequestedMilliGPU()
				if names[task.Name] {
					t.Fatalf("name %q appears twice", task.Name)
				}
				names[task.Name] = true
				dupes = dupes || strings.Contains(task.Name, "-dup")
			}
			if requested < tc.wantMin {
				t.Errorf("requested %d milli-GPU, want at least %d", requested, tc.wantMin)
			}
			last := got[len(got)-1].RequestedMilliGPU()
			if requested-last >= tc.wantMin {
				t.Errorf("the last task was not needed: %d without it already reaches %d", requested-last, tc.wantMin)
			}
			if tc.wantCut && len(got) >= len(tasks) {
				t.Errorf("got %d tasks, want the list cut", len(got))
			}
			if dupes != tc.wantDupes {
				t.Errorf("dupes = %v, want %v", dupes, tc.wantDupes)
			}
			again, _ := Arrival(tasks, tc.capacity, 42, tc.arrival)
			for i := range got {
				if again[i].Name != got[i].Name {
					t.Fatalf("same seed gave a different order at %d: %s vs %s", i, again[i].Name, got[i].Name)
				}
			}
		})
	}
	if _, err := Arrival(nil, 1000, 1, 1.3); err == nil {
		t.Error("empty list: want an error")
	}
	if _, err := Arrival([]Task{{Name: "cpu"}}, 1000, 1, 1.3); err == nil {
		t.Error("no GPU task: want an error")
	}
}

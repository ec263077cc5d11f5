package mpsv3

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestV3Commands(t *testing.T) {
	spec := NamespaceSpec{Name: "tangram_c", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M"}
	tests := []struct {
		got  []string
		want string
	}{
		{serverCreate("tangram", 0, []string{"GPU-a", "GPU-b"}), "server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b"},
		{serverList(), "server list --format=csv"},
		{namespaceCreate("tangram", "tangram_c"), "namespace create tangram_c --server=tangram"},
		{namespaceSet("tangram", spec), "namespace set tangram_c --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M"},
		{namespaceSet("tangram", NamespaceSpec{Name: "tangram_c"}), ""},
		{namespaceList("tangram"), "namespace list --server=tangram --format=csv"},
		{namespaceGet("tangram", "tangram_c", "pipe-directory"), "namespace get tangram_c tangram pipe-directory"},
		{clientList("tangram"), "client list --server=tangram --format=csv,noheader"},
		{clientTerminate(42), "client terminate 42"},
		{namespaceDelete("tangram", "tangram_c", false), "namespace delete tangram_c --server=tangram"},
		{namespaceDelete("tangram", "tangram_c", true), "namespace delete tangram_c --server=tangram --force"},
	}
	for _, tt := range tests {
		if got := strings.Join(tt.got, " "); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestParseV3CSV(t *testing.T) {
	tests := []struct {
		name      string
		out       string
		server    string
		wantState ServerState
		wantReady bool
		wantNS    map[string]NamespaceSpec
		wantErr   string
	}{
		{name: "server Ready, columns in another order, device list quoted",
			out: "uid,status,name,pid,pipe-directory,allowed-devices\n0,Ready,tangram,4242,/p/tangram,\"GPU-a,GPU-b\"\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "Ready", PID: "4242"}, wantReady: true},
		{name: "status in another case", out: "name,status\ntangram,READY\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "READY"}, wantReady: true},
		{name: "no status column: the pid tells", out: "name,pid\ntangram,4242\n", server: "tangram",
			wantState: ServerState{Listed: true, PID: "4242"}, wantReady: true},
		{name: "starting", out: "name,pid,status\ntangram,0,Starting\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "Starting", PID: "0"}},
		{name: "a status word we do not know, but the server's pid", out: "name,pid,status\ntangram,4242,Running\n", server: "tangram",
			wantState: ServerState{Listed: true, Status: "Running", PID: "4242"}, wantReady: true},
		{name: "listed without status or pid", out: "name,uid\ntangram,0\n", server: "tangram",
			wantState: ServerState{Listed: true}},
		{name: "server not listed", out: "name,status\nother,Ready\n", server: "tangram"},
		{name: "no header", out: "", server: "tangram", wantErr: "no header line"},
		{name: "no name column", out: "status\nReady\n", server: "tangram", wantErr: `no "name" column`},
		{name: "short row", out: "name,status\ntangram\n", server: "tangram", wantErr: "has 1 fields, the header 2"},
		{name: "namespaces, hyphenated columns",
			out: "name,server,active-thread-percentage,pinned-memory-limit,client-priority,pipe-directory\ntangram_a,tangram,30.00,20G,,/p/tangram/tangram_a\nother,tangram,100.00,none,,/p/tangram/other\n",
			wantNS: map[string]NamespaceSpec{
				"tangram_a": {Name: "tangram_a", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20G", PipeDirectory: "/p/tangram/tangram_a"},
				"other":     {Name: "other", ActiveThreadPercentage: 100, PinnedMemoryLimit: "none", PipeDirectory: "/p/tangram/other"},
			}},
		{name: "namespaces, underscored columns",
			out: "server,name,active_thread_percentage,pinned_memory_limit,pipe_directory\ntangram,tangram_a,30,20480M,/p/tangram/tangram_a\n",
			wantNS: map[string]NamespaceSpec{
				"tangram_a": {Name: "tangram_a", ActiveThreadPercentage: 30, PinnedMemoryLimit: "20480M", PipeDirectory: "/p/tangram/tangram_a"},
			}},
		{name: "bad percentage", out: "name,active-thread-percentage\nx,lots\n", wantErr: "not a number"},
		{name: "bad size", out: "name,pinned_memory_limit\nx,lots\n", wantErr: "pinned-memory-limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.server != "" {
				var state ServerState
				state, err = serverState(tt.out, tt.server)
				if err == nil && (state != tt.wantState || state.Ready() != tt.wantReady) {
					t.Errorf("state %+v (ready %t), want %+v (ready %t)", state, state.Ready(), tt.wantState, tt.wantReady)
				}
			} else {
				var ns map[string]NamespaceSpec
				ns, err = parseNamespaces(tt.out)
				if err == nil && !reflect.DeepEqual(ns, tt.wantNS) {
					t.Errorf("namespaces %+v, want %+v", ns, tt.wantNS)
				}
			}
			if err == nil && tt.wantErr != "" || tt.wantErr == "" && err != nil ||
				tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestParseClientPIDs reads client lists laid out as the r615 capture in
// NVIDIA-FACTS.md ("Round two"): pid, server, device UUID,
// "<server>/<namespace> (<context>)", command.
func TestParseClientPIDs(t *testing.T) {
	tests := []struct {
		name, out string
		want      []int
	}{
		{name: "r615 rows",
			out:  "3167082,tangram,GPU-0b7c3a8e,tangram/tangram_a (0),VLLM::EngineCore\n42,tangram,GPU-0b7c3a8e,tangram/tangram_b (1),python\n99,tangram,GPU-1f2d,tangram/tangram_a (2),python train.py\n",
			want: []int{3167082, 99}},
		{name: "a command with commas", out: "7,tangram,GPU-a,tangram/tangram_a (0),python -c print(1,2)\n", want: []int{7}},
		{name: "without the context", out: "8,tangram,GPU-a,tangram/tangram_a,python\n", want: []int{8}},
		{name: "a daemon that prints the header anyway", out: "pid,server,device,namespace,command\n9,tangram,GPU-a,tangram/tangram_a (0),python\n", want: []int{9}},
		{name: "a namespace whose name extends ours is not ours", out: "10,tangram,GPU-a,tangram/tangram_a_2 (0),python\n", want: nil},
		{name: "the same namespace of another server", out: "11,other,GPU-a,other/tangram_a (0),python\n", want: nil},
		{name: "a bare namespace name is not a row of ours", out: "12,tangram,tangram_a\n", want: nil},
		{name: "no clients", out: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseClientPIDs(tt.out, "tangram", "tangram_a")
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("clients of tangram_a: %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

package mps

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
		{v3ServerCreate("tangram", 0, []string{"GPU-a", "GPU-b"}), "server create tangram --uid=0 --allowed-devices=GPU-a,GPU-b"},
		{v3ServerList(), "server list --format=csv"},
		{v3NamespaceCreate("tangram", "tangram_c"), "namespace create tangram_c --server=tangram"},
		{v3NamespaceSet("tangram", spec), "namespace set tangram_c --server=tangram --active-thread-percentage=30 --pinned-memory-limit=20480M"},
		{v3NamespaceSet("tangram", NamespaceSpec{Name: "tangram_c"}), ""},
		{v3NamespaceList("tangram"), "namespace list --server=tangram --format=csv"},
		{v3NamespacePipeDir("tangram", "tangram_c"), "namespace get tangram_c tangram pipe_directory"},
		{v3ClientList("tangram"), "client list --server=tangram --format=csv,noheader"},
		{v3ClientTerminate("tangram", 42), "client terminate 42 --server=tangram"},
		{v3NamespaceDelete("tangram", "tangram_c", false), "namespace delete tangram_c --server=tangram"},
		{v3NamespaceDelete("tangram", "tangram_c", true), "namespace delete tangram_c --server=tangram --force"},
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
			if errString(err) == "" && tt.wantErr != "" || tt.wantErr == "" && err != nil ||
				tt.wantErr != "" && !strings.Contains(errString(err), tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseClientPIDs(t *testing.T) {
	out := "1234567,tangram,tangram_a\n42,tangram,tangram_b\n99,tangram,tangram_a\n"
	if got, err := parseClientPIDs(out, "tangram_a"); err != nil || !slices.Equal(got, []int{1234567, 99}) {
		t.Errorf("clients of tangram_a: %v, %v", got, err)
	}
	// Another column order: the namespace first.
	if got, err := parseClientPIDs("tangram_b, 7\n", "tangram_b"); err != nil || !slices.Equal(got, []int{7}) {
		t.Errorf("clients of tangram_b: %v, %v", got, err)
	}
	if got, err := parseClientPIDs("", "tangram_a"); err != nil || len(got) != 0 {
		t.Errorf("no clients: %v, %v", got, err)
	}
}

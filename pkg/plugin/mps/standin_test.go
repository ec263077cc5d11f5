package mps

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStandInCommands(t *testing.T) {
	type step struct {
		cmd     string
		reply   string
		wantErr string
	}
	tests := []struct {
		name     string
		protocol int
		steps    []step
	}{
		{
			name: "legacy defaults and servers", protocol: 2,
			steps: []step{
				{cmd: "get_server_list", reply: ""},
				{cmd: "get_default_active_thread_percentage", reply: "100.0\n"},
				{cmd: "set_default_active_thread_percentage 40", reply: "40.0\n"},
				{cmd: "get_default_active_thread_percentage", reply: "40.0\n"},
				{cmd: "set_default_active_thread_percentage 0", wantErr: "not a percentage"},
				{cmd: "set_default_device_pinned_mem_limit 0 2G"},
				{cmd: "set_default_device_pinned_mem_limit GPU-1234 512M"},
				{cmd: "get_default_device_pinned_mem_limit 0", reply: "2G\n"},
				{cmd: "get_default_device_pinned_mem_limit 1", reply: "0\n"},
				{cmd: "set_default_device_pinned_mem_limit 0 lots", wantErr: "not a memory limit"},
				{cmd: "start_server -uid 1000"},
				{cmd: "start_server -uid 0"},
				{cmd: "get_server_list", reply: "100001\n100002\n"},
				{cmd: "set_active_thread_percentage 100001 25"},
				{cmd: "set_device_pinned_mem_limit 100002 0 1G"},
				{cmd: "set_active_thread_percentage 7 25", wantErr: "no MPS server with PID 7"},
				{cmd: "get_client_list 100001", reply: ""},
				{cmd: "shutdown_server 100001 -f"},
				{cmd: "get_server_list", reply: "100002\n"},
				{cmd: "start_server", wantErr: "usage: start_server -uid <uid>"},
				{cmd: "server create s0", wantErr: "need a daemon started with -p 3"},
				{cmd: "frobnicate", wantErr: `unknown command "frobnicate"`},
				{cmd: "quit -t 5"},
			},
		},
		{
			name: "MPS v3 servers and namespaces", protocol: 3,
			steps: []step{
				{cmd: "server create node-shares --uid=0 --allowed-devices=GPU-a,GPU-b"},
				{cmd: "server create node-shares", wantErr: "server node-shares exists"},
				{cmd: "server create other --colour=red", wantErr: "unknown option --colour"},
				{cmd: "namespace create claim-1 --server=node-shares"},
				{cmd: "namespace create claim-1 --server=node-shares", wantErr: "namespace claim-1 exists"},
				{cmd: "namespace create claim-2", wantErr: "usage: namespace create"},
				{cmd: "namespace create claim-2 --server=missing", wantErr: "no server missing"},
				{cmd: "namespace create ../x --server=node-shares", wantErr: "not a valid name"},
				{cmd: "namespace set claim-1 --server=node-shares --active-thread-percentage=50 --pinned-memory-limit=20480M"},
				{cmd: "namespace set claim-1 --server=node-shares --active-thread-percentage=500", wantErr: "not a percentage"},
				{cmd: "namespace set claim-1 --server=node-shares --pinned-memory-limit=lots", wantErr: "not a memory limit"},
				{cmd: "namespace set claim-1 --server=node-shares --colour=red", wantErr: "unknown setting --colour"},
				{cmd: "namespace get claim-1 --server=node-shares --format=csv",
					reply: "server,name,active_thread_percentage,pinned_memory_limit,client_priority\nnode-shares,claim-1,50,20480M,\n"},
				{cmd: "namespace list", reply: "node-shares claim-1 50 20480M \n"},
				{cmd: "namespace list --server=other --format=csv", reply: "server,name,active_thread_percentage,pinned_memory_limit,client_priority\n"},
				{cmd: "namespace list --format=json", wantErr: "only csv"},
				{cmd: "server list --format=csv", reply: "name,status,uid,allowed_devices\nnode-shares,running,0,GPU-a,GPU-b\n"},
				{cmd: "server delete node-shares", wantErr: "still has namespace claim-1"},
				{cmd: "namespace delete claim-1 --server=node-shares"},
				{cmd: "namespace delete claim-1 --server=node-shares", wantErr: "no namespace claim-1"},
				{cmd: "server delete node-shares"},
				{cmd: "server list", reply: ""},
				{cmd: "namespace frob", wantErr: `unknown command "namespace frob"`},
				// Legacy commands the plugin uses keep working.
				{cmd: "get_server_list", reply: ""},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := shortRoot(t)
			pipe, logDir := filepath.Join(root, "pipe"), filepath.Join(root, "log")
			if err := os.MkdirAll(logDir, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- RunStandInControlDaemon(ctx, StandInConfig{PipeDir: pipe, LogDir: logDir, Protocol: tt.protocol})
			}()
			waitForStandIn(t, pipe)
			var sent []string
			for _, s := range tt.steps {
				sent = append(sent, s.cmd)
				reply, err := SendStandInCommand(ctx, pipe, s.cmd)
				if s.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), s.wantErr) {
						t.Errorf("%s: error %v, want %q", s.cmd, err, s.wantErr)
					}
					continue
				}
				if err != nil || reply != s.reply {
					t.Errorf("%s: %q, %v; want %q", s.cmd, reply, err, s.reply)
				}
			}
			logged, err := StandInCommands(logDir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(logged, sent) {
				t.Errorf("control.log has %q, want %q", logged, sent)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func waitForStandIn(t *testing.T, pipe string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := SendStandInCommand(context.Background(), pipe, ""); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in daemon does not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStandInWithMPSDaemon drives the stand-in program (a separate process)
// with the plugin's own client code: MPSDaemon starts it with -f, probes it
// with get_server_list and stops it with quit, as on a real node.
func TestStandInWithMPSDaemon(t *testing.T) {
	root := shortRoot(t)
	layout := Layout{Root: root}
	ctx := context.Background()
	d := NewMPSDaemon(MPSDaemonConfig{Layout: layout, Binary: standInBinary, VisibleDevices: []string{"GPU-a", "GPU-b"}, MultiUser: true})
	if err := d.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if d.Starts() != 1 {
		t.Errorf("%d starts, want 1", d.Starts())
	}
	if err := d.control(ctx, "set_default_active_thread_percentage 50"); err != nil {
		t.Fatal(err)
	}
	if err := d.control(ctx, "start_server -uid nobody"); err == nil || !strings.Contains(err.Error(), `is not a UID`) {
		t.Errorf("a bad command: %v, want the daemon's error", err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := SendStandInCommand(ctx, layout.PipeDir(), ""); err == nil {
		t.Error("the stand-in still answers after Stop")
	}
	logged, err := StandInCommands(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"get_server_list", "set_default_active_thread_percentage 50", "start_server -uid nobody", "quit"}
	if !slices.Equal(logged, want) {
		t.Errorf("control.log has %q, want %q", logged, want)
	}
	log, _ := os.ReadFile(filepath.Join(layout.LogDir(), "control.log"))
	if !strings.Contains(string(log), "multi-user true, CUDA_VISIBLE_DEVICES=GPU-a,GPU-b") {
		t.Errorf("control.log does not record -M and the cards:\n%s", log)
	}
}

// TestStandInDaemonMode starts the stand-in with -d -p 3, as an admin or the
// MPS v3 code would, talks to it and quits it with -q.
func TestStandInDaemonMode(t *testing.T) {
	root := shortRoot(t)
	layout := Layout{Root: root}
	if err := layout.create(); err != nil {
		t.Fatal(err)
	}
	env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + layout.PipeDir(), "CUDA_MPS_LOG_DIRECTORY=" + layout.LogDir()}
	ctx := context.Background()
	run := func(stdin string, args ...string) (string, error) {
		out, err := ExecCommander{}.Run(ctx, append([]string{standInBinary}, args...), env, stdin)
		return string(out), err
	}
	if _, err := run("", "-d", "-p", "3"); err != nil {
		t.Fatal(err)
	}
	out, err := run("server create s\nnamespace create ns --server=s\nnamespace list\n")
	if err != nil || out != "s ns   \n" {
		t.Errorf("v3 commands: %q, %v", out, err)
	}
	if _, err := run("", "-q"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := run("get_server_list\n"); err != nil {
			if !strings.Contains(err.Error(), "cannot find MPS control daemon process") {
				t.Errorf("after quit: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon still answers after -q")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := run("", "-p", "4"); err == nil {
		t.Error("-p 4 accepted")
	}
}

// TestStandInUnderRunControlDaemon is the daemon pod's path: RunControlDaemon
// runs the program with -f and sends quit when the pod is deleted.
func TestStandInUnderRunControlDaemon(t *testing.T) {
	root := shortRoot(t)
	layout := Layout{Root: root}
	if err := layout.create(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", layout.PipeDir())
	t.Setenv("CUDA_MPS_LOG_DIRECTORY", layout.LogDir())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunControlDaemon(ctx, ControlDaemonConfig{Binary: standInBinary}) }()
	waitForStandIn(t, layout.PipeDir())
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	logged, err := StandInCommands(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(logged, []string{"quit"}) {
		t.Errorf("control.log has %q, want quit", logged)
	}
}

package standin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
)

// TestStandInHang: the hang switch and file make a command never answer
// while the others are served, so deadline tests can hang one command.
func TestStandInHang(t *testing.T) {
	d := startStandIn(t, Config{Protocol: 3, Hang: []string{"namespace set"}})
	if _, err := d.v3("server", "create", "s", "--uid=0"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.v3("namespace", "create", "ns", "--server=s"); err != nil {
		t.Fatal(err)
	}
	ctl := Control(d.pipe, control.WithTimeout(200*time.Millisecond))
	start := time.Now()
	_, err := ctl(context.Background(), []string{"namespace", "set", "ns", "--server=s", "--active-thread-percentage=10"})
	wantErr(t, "a hung command", err, `"namespace set ns --server=s --active-thread-percentage=10" got no answer within 200ms`)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("a hung command: %v after %s, want the deadline", err, time.Since(start))
	}
	if _, err := ctl(context.Background(), []string{"server", "list", "--format=csv"}); err != nil {
		t.Errorf("another command while one hangs: %v", err)
	}
	// The file form, read at each command.
	if err := os.WriteFile(filepath.Join(d.logDir, HangFile), []byte("server list\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ctl(context.Background(), []string{"server", "list", "--format=csv"})
	wantErr(t, "a command the file names", err, "got no answer")
	if err := os.Remove(filepath.Join(d.logDir, HangFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl(context.Background(), []string{"server", "list", "--format=csv"}); err != nil {
		t.Errorf("after the file is removed: %v", err)
	}
	if got := ParseHang(" namespace set, server list\nquit\n"); !slices.Equal(got, []string{"namespace set", "server list", "quit"}) {
		t.Errorf("ParseHang = %q", got)
	}
}

// TestStandInCommands runs the commands' normal forms and answers.
func TestStandInCommands(t *testing.T) {
	type step struct {
		stdin   string
		args    []string
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
				{stdin: "get_server_list", reply: ""},
				{stdin: "get_default_active_thread_percentage", reply: "100.0\n"},
				{stdin: "set_default_active_thread_percentage 40", reply: "40.0\n"},
				{stdin: "get_default_active_thread_percentage", reply: "40.0\n"},
				{stdin: "set_default_active_thread_percentage 0", wantErr: "not a percentage"},
				{stdin: "set_default_device_pinned_mem_limit 0 2G"},
				{stdin: "set_default_device_pinned_mem_limit GPU-1234 512M"},
				{stdin: "get_default_device_pinned_mem_limit 0", reply: "2G\n"},
				{stdin: "get_default_device_pinned_mem_limit 1", reply: "0\n"},
				{stdin: "set_default_device_pinned_mem_limit 0 lots", wantErr: "not a memory limit"},
				{stdin: "start_server -uid 1000"},
				{stdin: "start_server -uid 0"},
				{stdin: "get_server_list", reply: "100001\n100002\n"},
				{stdin: "set_active_thread_percentage 100001 25"},
				{stdin: "set_device_pinned_mem_limit 100002 0 1G"},
				{stdin: "set_active_thread_percentage 7 25", wantErr: "no MPS server with PID 7"},
				{stdin: "get_client_list 100001", reply: ""},
				{stdin: "shutdown_server 100001 -f"},
				{stdin: "get_server_list", reply: "100002\n"},
				{stdin: "start_server", wantErr: "usage: start_server -uid <uid>"},
				{stdin: "server create s0", wantErr: `unknown command \"server\"`},
				{stdin: "frobnicate", wantErr: `unknown command \"frobnicate\"`},
				{stdin: "quit -t 5"},
			},
		},
		{
			name: "MPS v3 servers, namespaces and clients", protocol: 3,
			steps: []step{
				{args: []string{"server", "create", "node_shares", "--uid=0", "--allowed-devices=GPU-a,GPU-b"}},
				{args: []string{"server", "create", "node_shares"}, wantErr: "server node_shares exists"},
				{args: []string{"server", "create", "other", "--colour=red"}, wantErr: "unknown option --colour"},
				{args: []string{"namespace", "create", "claim_1", "--server=node_shares"}},
				{args: []string{"namespace", "create", "claim_1", "--server=node_shares"}, wantErr: "namespace claim_1 exists"},
				{args: []string{"namespace", "create", "claim_2"}, wantErr: "usage: namespace create"},
				{args: []string{"namespace", "create", "claim_2", "--server=missing"}, wantErr: "no server missing"},
				{args: []string{"namespace", "set", "claim_1", "--server=node_shares", "--active-thread-percentage=50", "--pinned-memory-limit=1536M"}},
				{args: []string{"namespace", "set", "claim_1", "--server=node_shares", "--active-thread-percentage=500"}, wantErr: "not a percentage"},
				{args: []string{"namespace", "set", "claim_1", "--server=node_shares", "--pinned-memory-limit=lots"}, wantErr: "not a memory size"},
				{args: []string{"namespace", "set", "claim_1", "--server=node_shares", "--colour=red"}, wantErr: "unknown option --colour"},
				{args: []string{"namespace", "get", "claim_1", "node_shares", "pinned-memory-limit"}, reply: "1536M\n"},
				{args: []string{"namespace", "get", "claim_1", "node_shares", "active-thread-percentage"}, reply: "50.00\n"},
				{args: []string{"namespace", "get", "claim_1", "node_shares", "active_thread_percentage"}, wantErr: "unknown field"},
				{args: []string{"namespace", "get", "claim_1", "node_shares", "colour"}, wantErr: "unknown field"},
				{args: []string{"namespace", "list", "--server=other", "--format=csv"}, wantErr: "no server other"},
				{args: []string{"namespace", "list", "--format=json"}, wantErr: "want csv"},
				{args: []string{"server", "delete", "node_shares"}, wantErr: "still has namespace claim_1"},
				{args: []string{"client", "terminate", "12"}, wantErr: "no client with PID 12"},
				{args: []string{"namespace", "delete", "claim_1", "--server=node_shares"}},
				{args: []string{"namespace", "delete", "claim_1", "--server=node_shares"}, wantErr: "no namespace claim_1"},
				{args: []string{"server", "delete", "node_shares"}},
				{args: []string{"server", "list", "--format=csv,noheader"}, reply: ""},
				{args: []string{"namespace", "frob"}, wantErr: `unknown command \"namespace frob\"`},
				{args: []string{"get_server_list"}, wantErr: "usage"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startStandIn(t, Config{Protocol: tt.protocol})
			var sent []string
			for _, s := range tt.steps {
				var reply string
				var err error
				if s.stdin != "" {
					sent = append(sent, s.stdin)
					reply, err = d.cli(s.stdin + "\n")
				} else {
					sent = append(sent, strings.Join(s.args, " "))
					reply, err = d.v3(s.args...)
				}
				what := fmt.Sprint(s.stdin, s.args)
				if s.wantErr != "" {
					wantErr(t, what, err, s.wantErr)
					continue
				}
				wantOK(t, what, reply, err, s.reply)
			}
			logged, err := Commands(d.logDir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(logged, sent) {
				t.Errorf("control.log has %q, want %q", logged, sent)
			}
		})
	}
}

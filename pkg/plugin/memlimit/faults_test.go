package memlimit

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
)

// hookWithin runs the hook in the background and fails the test if it has
// not returned within limit: a hook that waits for ever (a lock without a
// deadline) fails here instead of hanging the test binary.
func hookWithin(t *testing.T, limit time.Duration, run func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("the hook is still waiting after %s", limit)
		return nil
	}
}

// TestHeldLocksFailByTheirDeadline: a hook finding a lock held (by a hook
// hung in NVML, or in the kernel) refuses its container once its wait has
// passed, naming the lock and who may hold it, instead of waiting for
// ever; a lock of another pod does not concern it.
func TestHeldLocksFailByTheirDeadline(t *testing.T) {
	const otherPod = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	tests := []struct {
		name    string
		hold    func(recs records.Dir) (func(), error)
		wantErr []string // substrings; none: the hook succeeds
	}{
		{
			name: "the node's records lock",
			hold: func(recs records.Dir) (func(), error) {
				return recs.Lock(time.Second, "tangram-cdi-hook, claim 99999999-0000-0000-0000-000000000000, pod x")
			},
			wantErr: []string{"the memory limit records lock ", filepath.Join("memory-limits", "lock"), " is still held after 300ms, last taken by pid ",
				"(tangram-cdi-hook, claim 99999999-0000-0000-0000-000000000000, pod x)", "hung while holding it"},
		},
		{
			name:    "the lock of the container's own pod",
			hold:    func(recs records.Dir) (func(), error) { return recs.LockPod(podUID, time.Second) },
			wantErr: []string{"another tangram-cdi-hook of pod " + podUID + " has been setting the pod's GPU memory limits for over 300ms", "pods.lock", "NVML call"},
		},
		{
			name: "the lock of another pod",
			hold: func(recs records.Dir) (func(), error) { return recs.LockPod(otherPod, time.Second) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			n.container(t, 1, "0::"+podV1+"\n", podV1)
			lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA)
			unlock, err := tt.hold(records.Dir{Path: n.state})
			if err != nil {
				t.Fatal(err)
			}
			defer unlock()
			start := time.Now()
			err = hookWithin(t, 10*time.Second, func() error {
				return n.hookWaiting(t, lib, 300*time.Millisecond, nil, 1, claimX, uuidA+"=21474836480")
			})
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("hook: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("the hook succeeded under a held lock")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			}
			if took := time.Since(start); took < 300*time.Millisecond {
				t.Errorf("gave up after %s, before its 300ms wait", took)
			}
			if len(lib.calls) != 0 {
				t.Errorf("limits set without the lock: %v", lib.calls)
			}
		})
	}
}

// TestHungNVMLHoldsOnlyItsPod: a hook hung in an NVML call holds no lock
// that another pod's hook needs, on the same card too; another container
// of its own pod is refused by its deadline, with the pod's lock named.
func TestHungNVMLHoldsOnlyItsPod(t *testing.T) {
	const otherUID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	other := "/kubepods/besteffort/pod" + otherUID
	n := newNode(t)
	n.container(t, 1, "0::"+podV1+"\n", podV1)
	n.container(t, 2, "0::"+other+"/c2\n", other+"/c2")
	n.container(t, 3, "0::"+cgroupfsPod+"/c3\n", cgroupfsPod+"/c3")
	lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA)
	inside, release := make(chan struct{}), make(chan struct{})
	lib.beforeSet = func(_, cgroup string) {
		if strings.HasSuffix(cgroup, cgroupfsPod) {
			close(inside)
			<-release
		}
	}
	hung := make(chan error, 1)
	go func() { hung <- n.hookWaiting(t, lib, DefaultLockWait, nil, 1, claimX, uuidA+"=21474836480") }()
	<-inside

	err := hookWithin(t, 10*time.Second, func() error {
		return n.hookWaiting(t, lib, 300*time.Millisecond, nil, 2, claimY, uuidA+"=1073741824")
	})
	if err != nil {
		t.Fatalf("another pod's hook on the same card, while one hangs in NVML: %v", err)
	}
	err = hookWithin(t, 10*time.Second, func() error {
		return n.hookWaiting(t, lib, 300*time.Millisecond, nil, 3, claimX, uuidA+"=21474836480")
	})
	if err == nil || !strings.Contains(err.Error(), "another tangram-cdi-hook of pod "+podUID) {
		t.Fatalf("a second container of the hung hook's pod: %v, want a refusal naming the pod's lock", err)
	}
	close(release)
	if err := <-hung; err != nil {
		t.Fatalf("the hung hook, released: %v", err)
	}
	want := []string{uuidA + " " + other + " 0 1073741824", uuidA + " " + cgroupfsPod + " 0 21474836480"}
	if got := n.rel(lib.calls); !reflect.DeepEqual(got, want) {
		t.Errorf("limits set:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUnreadableRecords: another claim's record that cannot be read (torn
// by a crash, emptied, a stray file, a directory) is skipped and reported,
// and the healthy claim's container starts with its limit; the claim's own
// record unreadable refuses its container (fail closed: its pod and limits
// are unknown).
func TestUnreadableRecords(t *testing.T) {
	const stranger = "99999999-0000-0000-0000-000000000000"
	write := func(name, content string) func(t *testing.T, claims string) {
		return func(t *testing.T, claims string) {
			if err := os.WriteFile(filepath.Join(claims, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name     string
		setup    func(t *testing.T, claims string)
		wantErr  string // "" = the hook succeeds
		wantWarn string // in the warnings, on stderr and in the warnings file
	}{
		{"a neighbour's torn record", write(stranger+".json", `{"podCgroup":"/sys/fs/cgroup/kubepods/pod`), "", "claim " + stranger},
		{"a neighbour's empty record", write(stranger+".json", ""), "", "claim " + stranger},
		{"a stray file", write("notes.json", "not json"), "", "claim notes"},
		{"a directory named like a record", func(t *testing.T, claims string) { mkdir(t, filepath.Join(claims, stranger+".json")) }, "", "claim " + stranger},
		{"a temporary file of an interrupted write is no record", write(stranger+".json.tmp-123", "{"), "", ""},
		{"the claim's own record torn", write(claimX+".json", "{"), "reading the memory limit record of claim " + claimX, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t)
			n.container(t, 1, "0::"+podV2+"\n", podV2)
			claims := records.Dir{Path: n.state}.ClaimsDir()
			mkdir(t, claims)
			tt.setup(t, claims)
			lib := newFakeNVML(nvml.SUCCESS, nil, true, uuidA)
			var stderr bytes.Buffer
			err := n.hookWaiting(t, lib, time.Second, &stderr, 1, claimX, uuidA+"=21474836480")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("hook: %v, want an error containing %q", err, tt.wantErr)
				}
				if len(lib.calls) != 0 {
					t.Errorf("limits set for a claim whose record is unreadable: %v", lib.calls)
				}
				return
			}
			if err != nil {
				t.Fatalf("hook for a healthy claim: %v", err)
			}
			if want := []string{uuidA + " " + systemdPodDir + " 0 21474836480"}; !reflect.DeepEqual(n.rel(lib.calls), want) {
				t.Errorf("limits set %v, want %v", n.rel(lib.calls), want)
			}
			file, _ := os.ReadFile(filepath.Join(n.state, records.WarningsFile))
			if tt.wantWarn == "" {
				if stderr.Len() > 0 || len(file) > 0 {
					t.Errorf("warnings %q, file %q; want none", stderr.String(), file)
				}
				return
			}
			for where, got := range map[string]string{"stderr": stderr.String(), records.WarningsFile: string(file)} {
				if !strings.Contains(got, "skipping another claim's memory limit record") || !strings.Contains(got, tt.wantWarn) {
					t.Errorf("%s: %q, want a warning about %q", where, got, tt.wantWarn)
				}
			}
		})
	}
}

package gpucheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	limited   = "cuda-alloc: devices=1 total_mib=143771 free_mib=143000 allocated_mib=1280 refused=1 error=2\n"
	unlimited = "cuda-alloc: devices=1 total_mib=143771 free_mib=143000 allocated_mib=3072 refused=0 error=0\n"
)

func TestPlanClassicClients(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tools       ClientTools
		unreachable string
		wantView    string // "" runs, else part of the reason
		wantSecond  string
	}{
		{name: "everything", tools: ClientTools{Unshare: "/usr/bin/unshare", Setpriv: "/usr/bin/setpriv", Root: true}},
		{name: "no unshare", tools: ClientTools{Setpriv: "/usr/bin/setpriv", Root: true}, wantView: "no unshare"},
		{name: "no setpriv", tools: ClientTools{Unshare: "/usr/bin/unshare", Root: true}, wantSecond: "no setpriv"},
		{name: "not root", tools: ClientTools{Unshare: "u", Setpriv: "s"}, wantView: "not root", wantSecond: "not root"},
		{name: "a closed directory", tools: ClientTools{Unshare: "u", Setpriv: "s", Root: true}, unreachable: "/root",
			wantSecond: "/root is closed to other users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				what string
				d    Decision
				want string
			}{
				{"view", PlanContainerView(tc.tools), tc.wantView},
				{"second user", PlanSecondUser(tc.tools, tc.unreachable), tc.wantSecond},
			} {
				if c.want == "" && !c.d.Run {
					t.Errorf("%s: skipped (%s), want it run", c.what, c.d.Reason)
				}
				if c.want != "" && (c.d.Run || !strings.Contains(c.d.Reason, c.want)) {
					t.Errorf("%s: %+v, want skipped with %q", c.what, c.d, c.want)
				}
			}
		})
	}
}

func TestUnreachableAncestor(t *testing.T) {
	modes := map[string]fs.FileMode{"/": 0o755, "/tmp": 0o1777, "/tmp/out": 0o755, "/tmp/out/work": 0o700, "/tmp/out/work/mps": 0o755, "/root": 0o700}
	mode := func(p string) (fs.FileMode, error) {
		m, ok := modes[p]
		if !ok {
			return 0, errors.New("no such directory")
		}
		return fs.ModeDir | m, nil
	}
	for dir, want := range map[string]string{
		"/tmp/out":            "",
		"/tmp/out/work/mps/":  "/tmp/out/work",
		"/root/x":             "/root",
		"/tmp/out/missing/xy": "/tmp/out/missing",
	} {
		if got := UnreachableAncestor(dir, mode); got != want {
			t.Errorf("UnreachableAncestor(%s) = %q, want %q", dir, got, want)
		}
	}
}

func TestJudgeContainerClient(t *testing.T) {
	// view is the script's output around the client's (%s).
	view := func(write, shm string, before, after int) string {
		s := fmt.Sprintf("gpu-check-view: pipe-write=%s shm=%s shm-entries=%d\n%%s", write, shm, before)
		if after >= 0 {
			s += fmt.Sprintf("gpu-check-view-after: shm-entries=%d\n", after)
		}
		return s
	}
	for _, tc := range []struct {
		name, log, want string
		pass            bool
	}{
		{name: "a share's view, limited, nothing left", log: strings.Replace(view("refused", "tmpfs", 0, 0), "%s", limited, 1), pass: true, want: "it left nothing"},
		{name: "files left in its own /dev/shm are no failure", log: strings.Replace(view("refused", "tmpfs", 0, 2), "%s", limited, 1), pass: true, want: "it left 2 entries"},
		{name: "no namespace", log: limited, want: "mount namespace was not set up"},
		{name: "writable pipe directory", log: strings.Replace(view("allowed", "tmpfs", 0, 0), "%s", limited, 1), want: "read-only bind did not take"},
		{name: "not a tmpfs", log: strings.Replace(view("refused", "ext4", 0, 0), "%s", limited, 1), want: `"ext4"`},
		{name: "not under MPS: never refused", log: strings.Replace(view("refused", "tmpfs", 0, 0), "%s", unlimited, 1), want: "not held to its share"},
		{name: "no CUDA", log: strings.Replace(view("refused", "tmpfs", 0, -1), "%s", "cuda-alloc: cuInit failed with CUresult 999\n", 1), want: "reported no result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := JudgeContainerClient(2048, tc.log)
			if (o.Result == Passed) != tc.pass || !strings.Contains(o.Detail, tc.want) {
				t.Errorf("JudgeContainerClient = %+v, want passed=%v with %q", o, tc.pass, tc.want)
			}
		})
	}
}

func TestJudgeTwoUsers(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  TwoUsers
		pass bool
		want string
	}{
		{name: "served at once", run: TwoUsers{FirstLog: limited, SecondLog: limited, SecondDoneFirst: true}, pass: true, want: "UID 65534 was served while a root client held"},
		{name: "queued behind the root client", run: TwoUsers{FirstLog: limited, SecondLog: limited}, want: "one user at a time"},
		{name: "second not limited", run: TwoUsers{FirstLog: limited, SecondLog: unlimited, SecondDoneFirst: true}, want: "never refused"},
		{name: "first failed", run: TwoUsers{FirstLog: "cuda-alloc: no usable device\n", SecondLog: limited, SecondDoneFirst: true}, want: "the root client holding the server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := JudgeTwoUsers(2048, tc.run)
			if (o.Result == Passed) != tc.pass || !strings.Contains(o.Detail, tc.want) {
				t.Errorf("JudgeTwoUsers = %+v, want passed=%v with %q", o, tc.pass, tc.want)
			}
		})
	}
}

func TestCombineParts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts []Part
		want  Outcome
	}{
		{name: "all passed", parts: []Part{{"a", Pass("ok")}, {"b", Pass("fine")}}, want: Pass("a: ok; b: fine")},
		{name: "a skip is named", parts: []Part{{"a", Pass("ok")}, {"b", Skip("no setpriv")}}, want: Pass("a: ok; b: skipped: no setpriv")},
		{name: "one failed", parts: []Part{{"a", Fail("bad")}, {"b", Pass("fine")}}, want: Fail("a: FAILED: bad; b: fine")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CombineParts(tc.parts...); got != tc.want {
				t.Errorf("CombineParts = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestContainerClientScript runs the script ContainerClientArgv builds
// with a stand-in unshare that runs the rest as it is and a stand-in mount
// that does nothing (no namespace here): the script must hand the pipe
// directory to mount, run the client with the setpriv prefix before it,
// report the view and pass the client's status on.
func TestContainerClientScript(t *testing.T) {
	bin := t.TempDir()
	log := filepath.Join(bin, "mount.log")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// unshare --mount --propagation private -- CMD...: run CMD.
	write("unshare", `shift 4; exec "$@"`+"\n")
	write("mount", `echo "$@" >>`+log+"\n")
	write("runas", `echo "as other user"; exec "$@"`+"\n")
	write("client", `echo "client $*"; exit 3`+"\n")
	pipe := t.TempDir()
	argv := ContainerClientArgv(filepath.Join(bin, "unshare"), pipe, []string{filepath.Join(bin, "runas")}, []string{filepath.Join(bin, "client"), "3072"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit %v, want the client's 3; output %s", err, out)
	}
	for _, want := range []string{"as other user", "client 3072", "gpu-check-view: pipe-write=", "gpu-check-view-after: shm-entries="} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	mounts, _ := os.ReadFile(log)
	for _, want := range []string{"--bind " + pipe + " " + pipe, "-o remount,bind,ro " + pipe, "-t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm"} {
		if !strings.Contains(string(mounts), want) {
			t.Errorf("mount was not called with %q:\n%s", want, mounts)
		}
	}
	if entries, _ := os.ReadDir(pipe); len(entries) != 0 {
		t.Errorf("the write probe left %v in the pipe directory", entries)
	}
}

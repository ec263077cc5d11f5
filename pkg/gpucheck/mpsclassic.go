package gpucheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// The classic MPS check runs its client the way a share's container runs
// (docs/enforcement.md, "Classic MPS: what every share still shares"):
// in a mount namespace of its own, with the daemon's pipe directory bound
// read-only and a fresh tmpfs as its /dev/shm; and a second client under
// another UID beside a first one, which a multi-user daemon (-M, the
// plugin's default) must serve at once. This file holds the decisions and
// judgments; pkg/gpucheck/probe runs the processes.

// ClientTools is what the machine offers for running clients as a
// container would: util-linux's unshare and setpriv (paths, "" when
// absent) and whether the check runs as root.
type ClientTools struct {
	Unshare, Setpriv string
	Root             bool
}

// SecondUID is the UID of the second client (nobody).
const SecondUID = 65534

// PlanContainerView decides whether clients run in a container's view.
func PlanContainerView(t ClientTools) Decision {
	switch {
	case !t.Root:
		return Decision{Reason: "not root: a mount namespace of its own needs root"}
	case t.Unshare == "":
		return Decision{Reason: "no unshare (util-linux) on PATH: the client runs with the host's /dev/shm and a writable pipe directory"}
	}
	return Decision{Run: true}
}

// PlanSecondUser decides whether a second client under SecondUID can run:
// it needs setpriv, root, and every directory above the pipe directory
// open to other users (unreachable names the first that is not, "" when
// all are).
func PlanSecondUser(t ClientTools, unreachable string) Decision {
	switch {
	case !t.Root:
		return Decision{Reason: "not root: cannot start a client under another UID"}
	case t.Setpriv == "":
		return Decision{Reason: "no setpriv (util-linux) on PATH: cannot start a client under another UID"}
	case unreachable != "":
		return Decision{Reason: fmt.Sprintf("%s is closed to other users (no o+x), so a client of UID %d cannot reach the pipe directory; run the check from a directory others may traverse", unreachable, SecondUID)}
	}
	return Decision{Run: true}
}

// UnreachableAncestor returns the first directory from / down to dir
// (dir included) that other users cannot traverse, "" when there is none;
// mode is os.Stat's view, injected for tests.
func UnreachableAncestor(dir string, mode func(string) (fs.FileMode, error)) string {
	dir = filepath.Clean(dir)
	var chain []string
	for d := dir; ; d = filepath.Dir(d) {
		chain = append([]string{d}, chain...)
		if d == filepath.Dir(d) {
			break
		}
	}
	for _, d := range chain {
		m, err := mode(d)
		if err != nil || m&0o001 == 0 {
			return d
		}
	}
	return ""
}

const (
	viewMark      = "gpu-check-view:"
	viewAfterMark = "gpu-check-view-after:"
)

// ContainerClientArgv runs client in a mount namespace of its own, as a
// classic share's container sees MPS: pipeDir bound read-only onto itself,
// a fresh tmpfs of 64 MiB at /dev/shm. Before the client it prints what
// the view is (whether a write into pipeDir is refused, the file system
// of /dev/shm); after it, how many entries the client left in its
// /dev/shm. runAs, when set, is put before client (setpriv ...), so the
// mounts are made as root and only the client runs as the other user.
func ContainerClientArgv(unshare, pipeDir string, runAs, client []string) []string {
	script := `p="$0"
mount --bind "$p" "$p" && mount -o remount,bind,ro "$p" && mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm || exit 97
if touch "$p/.gpu-check-write" 2>/dev/null; then w=allowed; rm -f "$p/.gpu-check-write"; else w=refused; fi
echo "` + viewMark + ` pipe-write=$w shm=$(stat -f -c %T /dev/shm) shm-entries=$(ls -A /dev/shm | wc -l)"
"$@"
rc=$?
echo "` + viewAfterMark + ` shm-entries=$(ls -A /dev/shm | wc -l)"
exit $rc`
	argv := []string{unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script, pipeDir}
	argv = append(argv, runAs...)
	return append(argv, client...)
}

// SetprivArgv runs the next program as uid (group the same, no
// supplementary groups), keeping the environment.
func SetprivArgv(setpriv string, uid int) []string {
	id := strconv.Itoa(uid)
	return []string{setpriv, "--reuid=" + id, "--regid=" + id, "--clear-groups"}
}

// ContainerView is what ContainerClientArgv's script reported.
type ContainerView struct {
	PipeWriteRefused bool
	ShmFS            string
	// ShmEntriesBefore and After count the entries of the client's own
	// /dev/shm before and after the client ran; After is -1 when the
	// script did not get there.
	ShmEntriesBefore, ShmEntriesAfter int
}

// ParseContainerView reads the view lines from a client's output.
func ParseContainerView(log string) (ContainerView, error) {
	v := ContainerView{ShmEntriesAfter: -1}
	seen := false
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, viewMark):
			seen = true
			f := fields(strings.TrimPrefix(line, viewMark))
			v.PipeWriteRefused = f["pipe-write"] == "refused"
			v.ShmFS = f["shm"]
			v.ShmEntriesBefore, _ = strconv.Atoi(f["shm-entries"])
		case strings.HasPrefix(line, viewAfterMark):
			n, err := strconv.Atoi(fields(strings.TrimPrefix(line, viewAfterMark))["shm-entries"])
			if err == nil {
				v.ShmEntriesAfter = n
			}
		}
	}
	if !seen {
		return v, fmt.Errorf("no %q line: the client's mount namespace was not set up (the output says: %q)", viewMark, strings.TrimSpace(log))
	}
	return v, nil
}

func fields(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// JudgeContainerClient judges a client run by ContainerClientArgv under a
// limit of limitMiB: its view must be a share's (a write into the pipe
// directory refused, a tmpfs of its own at /dev/shm), and it must have
// been served by MPS and held to the limit (JudgeLimitedClient: a client
// that could not reach the server runs without MPS and is never refused).
func JudgeContainerClient(limitMiB int64, log string) Outcome {
	v, err := ParseContainerView(log)
	if err != nil {
		return Fail("%v", err)
	}
	switch {
	case !v.PipeWriteRefused:
		return Fail("the client could write into the pipe directory: the read-only bind did not take, so this is not a share's view")
	case v.ShmFS != "tmpfs":
		return Fail("the client's /dev/shm is %q, not a tmpfs of its own", v.ShmFS)
	}
	o := JudgeLimitedClient(limitMiB, log)
	view := "through a read-only pipe directory and a /dev/shm of its own"
	if o.Result != Passed {
		return Fail("a client %s was not held to its share (%s): classic shares would not be either", view, o.Detail)
	}
	left := "nothing"
	if v.ShmEntriesAfter > v.ShmEntriesBefore {
		left = fmt.Sprintf("%d entries", v.ShmEntriesAfter-v.ShmEntriesBefore)
	}
	return Pass("a client %s: %s; it left %s in its /dev/shm", view, o.Detail, left)
}

// TwoUsers is what the check saw of two clients of different UIDs on one
// multi-user daemon: the first (root) holds its context while the second
// (SecondUID) runs.
type TwoUsers struct {
	FirstLog, SecondLog string
	// SecondDoneFirst: the second client ended while the first still held
	// its context.
	SecondDoneFirst bool
}

// JudgeTwoUsers: a multi-user daemon serves both clients at once, each
// held to its limit. Without -M the second client would be queued until
// the first exits (nvidia-cuda-mps-control(1); seen on r580).
func JudgeTwoUsers(limitMiB int64, r TwoUsers) Outcome {
	first := JudgeLimitedClient(limitMiB, r.FirstLog)
	if first.Result != Passed {
		return Fail("the root client holding the server: %s", first.Detail)
	}
	if !r.SecondDoneFirst {
		return Fail("the client of UID %d was served only after the root client exited: the daemon serves one user at a time (was it started without -M?); pods of different users would take turns", SecondUID)
	}
	second := JudgeLimitedClient(limitMiB, r.SecondLog)
	if second.Result != Passed {
		return Fail("the client of UID %d, beside a root client: %s", SecondUID, second.Detail)
	}
	return Pass("a client of UID %d was served while a root client held the server (multi-user daemon): %s", SecondUID, second.Detail)
}

// Part is one part of a check, for CombineParts.
type Part struct {
	Name    string
	Outcome Outcome
}

// CombineParts makes one outcome of a check's parts: failed when a part
// failed, else passed (noted when a part was); skipped parts are named
// with their reason.
func CombineParts(parts ...Part) Outcome {
	var details []string
	failed, noted := false, false
	for _, p := range parts {
		noted = noted || p.Outcome.Noted
		switch p.Outcome.Result {
		case Failed:
			failed = true
			details = append(details, p.Name+": FAILED: "+p.Outcome.Detail)
		case Skipped:
			details = append(details, p.Name+": skipped: "+p.Outcome.Detail)
		default:
			details = append(details, p.Name+": "+p.Outcome.Detail)
		}
	}
	if failed {
		return Fail("%s", strings.Join(details, "; "))
	}
	out := Pass("%s", strings.Join(details, "; "))
	out.Noted = noted
	return out
}

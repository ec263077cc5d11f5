package podcgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const uid = "1b6d5f1e-9c5a-4b8f-9a0e-2d7c3e1f4a5b"

var underscored = strings.ReplaceAll(uid, "-", "_")

// TestPodOf: the pod of a process, from /proc/<pid>/cgroup as each cgroup
// driver and version writes it. The memory-limit hook's tests
// (pkg/plugin/memlimit TestFindPodCgroup) hold Find to the same names.
func TestPodOf(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantUID string // "": no pod
		wantErr string
	}{
		{name: "cgroup v2, systemd, burstable",
			content: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored + ".slice/cri-containerd-0123.scope\n", wantUID: uid},
		{name: "cgroup v2, systemd, an init container of the same pod",
			content: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored + ".slice/cri-containerd-4567.scope\n", wantUID: uid},
		{name: "cgroup v2, systemd, guaranteed",
			content: "0::/kubepods.slice/kubepods-pod" + underscored + ".slice/cri-containerd-0123.scope\n", wantUID: uid},
		{name: "cgroup v2, the kubelet under --cgroup-root (kind)",
			content: "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + underscored + ".slice/cri-containerd-0123.scope\n", wantUID: uid},
		{name: "cgroup v2, cgroupfs, an ephemeral container",
			content: "0::/kubepods/besteffort/pod" + uid + "/89ab\n", wantUID: uid},
		{name: "cgroup v1: the memory controller's line",
			content: "12:pids:/system.slice\n11:memory:/kubepods/burstable/pod" + uid + "/0123\n1:name=systemd:/kubepods/burstable/pod" + uid + "/0123\n", wantUID: uid},
		{name: "a static pod (32 hex digits)",
			content: "0::/kubepods/burstable/pod0123456789abcdef0123456789abcdef/0123\n", wantUID: "0123456789abcdef0123456789abcdef"},
		{name: "CRI-O's scope name",
			content: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored + ".slice/crio-0123.scope\n", wantUID: uid},
		{name: "Docker's scope name",
			content: "0::/kubepods.slice/kubepods-pod" + underscored + ".slice/docker-0123.scope\n", wantUID: uid},
		{name: "a cgroup nested below the container's",
			content: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + underscored + ".slice/cri-containerd-0123.scope/init\n", wantUID: uid},
		{name: "read from a container's own cgroup namespace: the kubepods parent cut off",
			content: "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod" + underscored + ".slice/cri-containerd-4567.scope\n", wantUID: uid},
		{name: "read from a container's own namespace, cgroupfs: the pod the first element",
			content: "0::/../../pod" + uid + "/4567\n", wantUID: uid},
		{name: "read from a container's own namespace: a process of the reader's own container", content: "0::/\n"},
		{name: "read from a container's own namespace: another container of the reader's pod", content: "0::/../cri-containerd-89ab.scope\n"},
		{name: "a process in its pod's cgroup itself, no container's: no pod",
			content: "0::/kubepods/besteffort/pod" + uid + "\n"},
		{name: "a host process: no pod", content: "0::/user.slice/user-0.slice/session-1.scope\n"},
		{name: "the runtime itself: no pod", content: "0::/system.slice/containerd.service\n"},
		{name: "a pod-like name outside kubepods: no pod", content: "0::/user.slice/pod" + uid + "/0123\n"},
		{name: "malformed", content: "garbage\n", wantErr: `line "garbage" is not <id>:<controllers>:<path>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseProcCgroup(tt.content)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseProcCgroup: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := c.PodOf()
			if ok != (tt.wantUID != "") || got != tt.wantUID {
				t.Errorf("PodOf = %q, %t; want %q", got, ok, tt.wantUID)
			}
		})
	}
}

// TestRead: a process that exits before its cgroup is read is
// ErrProcessGone, which a caller skips; an unreadable file is another
// error, naming it.
func TestRead(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "42", "cgroup"), []byte("0::/kubepods/pod"+uid+"/0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Read(proc, 42)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := c.PodOf(); !ok || got != uid {
		t.Errorf("PodOf of pid 42 = %q, %t", got, ok)
	}
	if _, err := Read(proc, 43); !errors.Is(err, ErrProcessGone) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(proc, "43", "cgroup")) {
		t.Errorf("Read of an exited process: %v, want ErrProcessGone with the OS error, naming the file", err)
	}
	// A process that exits between the open and the read answers ESRCH.
	if !gone(&fs.PathError{Op: "read", Path: "/proc/45/cgroup", Err: syscall.ESRCH}) || gone(syscall.EACCES) {
		t.Error("gone: ESRCH is a process gone, EACCES is not")
	}
	if err := os.MkdirAll(filepath.Join(proc, "44", "cgroup"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(proc, 44); err == nil || errors.Is(err, ErrProcessGone) {
		t.Errorf("Read of a directory: %v, want an error other than ErrProcessGone", err)
	}
}

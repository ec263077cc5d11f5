package plugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// containerView is what a container given the claim's CDI devices sees of
// the MPS directories, resolved to host paths as the runtime binds them.
type containerView struct {
	pipe, shm    string
	pipeReadOnly bool
}

func viewOf(t *testing.T, specDir string, ids []string) containerView {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	var v containerView
	var pipeInContainer string
	for _, id := range ids {
		d := cache.GetDevice(id)
		if d == nil {
			t.Fatalf("no CDI device %s", id)
		}
		for _, kv := range d.ContainerEdits.Env {
			if k, val, _ := strings.Cut(kv, "="); k == "CUDA_MPS_PIPE_DIRECTORY" {
				pipeInContainer = val
			}
		}
		for _, m := range d.ContainerEdits.Mounts {
			switch m.ContainerPath {
			case "/dev/shm":
				v.shm = m.HostPath
			case pipeInContainer:
				v.pipe, v.pipeReadOnly = m.HostPath, slices.Contains(m.Options, "ro")
			}
		}
	}
	if v.pipe == "" || v.shm == "" {
		t.Fatalf("the spec gives no pipe directory or /dev/shm: %+v", v)
	}
	return v
}

// TestClassicShareReachesTheStandInThroughItsSpec: a classic MPS share's
// CDI spec gives its container what a classic client needs (the strict
// stand-in's classic-client rules, from NVIDIA's documentation and a GPU
// run on r580): the daemon's own pipe directory, read-only, and a
// /dev/shm of the claim's own, not the daemon's, which no other claim
// sees. A CUDA client started in that view connects. If a real classic
// client turned out to create entries in the pipe directory (not seen on
// r580; the stand-in's switch), the read-only mount would fail it, and
// this test says so.
func TestClassicShareReachesTheStandInThroughItsSpec(t *testing.T) {
	root, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	layout := daemon.Layout{Root: root}
	if err := os.MkdirAll(layout.ShmDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- standin.RunDaemon(ctx, standin.Config{PipeDir: layout.PipeDir(), LogDir: filepath.Join(root, "log"), Protocol: 2})
	}()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for standin.Probe(context.Background(), layout.PipeDir()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in daemon does not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}

	specDir := filepath.Join(root, "cdi")
	store, err := cdi.NewSpecStore(specDir)
	if err != nil {
		t.Fatal(err)
	}
	dirs := daemon.ClaimDirs{Layout: layout}
	specs := cdi.ClaimSpecs{Store: store, Hardware: cdi.NoHardware{}, Cards: CardsByDevice(testGPUs()), ClaimShmDir: dirs.ShmDir}
	card := testGPUs()[0]
	m := mps.NewManager(layout, &daemon.SimulatedDaemon{Layout: layout}, &daemon.RecordingComputeModeSetter{}, []string{card.UUID})
	defer m.Close()
	claim := prepared.Claim{UID: "c1", Namespace: "default", Name: "c1", Devices: []prepared.Device{{Request: "gpu", Device: "gpu-0",
		GPUUUID: card.UUID, ShareID: "s1", Share: true, MemoryBytes: 20 << 30, MPSPipeDir: layout.PipeDir()}}}
	specs.MPS = m
	ids, err := specs.Write(context.Background(), claim)
	if err != nil {
		t.Fatal(err)
	}
	view := viewOf(t, specDir, slices.Concat(ids...))
	if !view.pipeReadOnly {
		t.Errorf("the classic daemon's pipe directory %s is mounted read-write into a share's container", view.pipe)
	}

	client := func(v containerView, extra ...string) error {
		env := []string{"CUDA_MPS_PIPE_DIRECTORY=" + v.pipe, standin.EnvClientShm + "=" + v.shm}
		if v.pipeReadOnly {
			env = append(env, standin.EnvClientPipeRO+"=1")
		}
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_, err := standin.Runner{}.Run(cctx, []string{control.BinaryName, "standin", "client"}, append(env, extra...), "")
		return err
	}
	if view.shm != dirs.ShmDir("c1") {
		t.Errorf("a classic share's container mounts %s at /dev/shm, want the claim's own %s (not the daemon's %s)", view.shm, dirs.ShmDir("c1"), layout.ShmDir())
	}
	// The driver creates the claim's /dev/shm at prepare.
	if err := os.MkdirAll(dirs.ShmDir("c1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := client(view); err != nil {
		t.Errorf("a CUDA client in the share's container does not reach MPS: %v", err)
	}
	if err := client(view, standin.EnvClientWritesPipe+"=1"); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a client that creates an entry in the read-only pipe directory: %v, want it refused", err)
	}
}

//go:build cgo

package nvidia

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

const driverVersion = "550.54.15" // what the dgxa100 mock reports

// newMock returns the dgxa100 mock with the calls nvcdi needs that the
// mock leaves unset, and the UUIDs of its cards.
func newMock() (*dgxa100.Server, []string) {
	m := dgxa100.New()
	var uuids []string
	for _, dev := range m.Devices {
		d := dev.(*dgxa100.Device)
		d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
		uuids = append(uuids, d.UUID)
	}
	return m, uuids
}

// fakeDriverRoot lays out a driver root with libcuda and, when the process
// may create device nodes, /dev/nvidia0, nvidiactl and nvidia-uvm.
func fakeDriverRoot(t *testing.T) (root string, haveNodes bool) {
	t.Helper()
	root = t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"libcuda.so." + driverVersion, "libnvidia-ml.so." + driverVersion} {
		if err := os.WriteFile(filepath.Join(lib, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	haveNodes = true
	for minor, name := range map[uint32]string{0: "nvidia0", 255: "nvidiactl", 254: "nvidia-uvm"} {
		err := unix.Mknod(filepath.Join(root, "dev", name), unix.S_IFCHR|0o666, int(unix.Mkdev(195, minor)))
		if errors.Is(err, unix.EPERM) {
			haveNodes = false // unprivileged: nvcdi must then find no nodes
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root, haveNodes
}

func TestCardAndCommonEdits(t *testing.T) {
	m, uuids := newMock()
	root, haveNodes := fakeDriverRoot(t)
	h, err := newWithNVML(context.Background(), Options{DriverRoot: root, DevRoot: root, CDIHookPath: "/usr/bin/nvidia-cdi-hook"}, m)
	if err != nil {
		t.Fatal(err)
	}

	card, err := h.CardEdits(gpu.GPU{Index: 0, UUID: uuids[0]})
	if err != nil {
		t.Fatalf("CardEdits: %v", err)
	}
	var nodes []string
	for _, n := range card.DeviceNodes {
		nodes = append(nodes, n.Path+"<-"+strings.TrimPrefix(n.HostPath, root))
	}
	if haveNodes {
		if want := []string{"/dev/nvidia0<-/dev/nvidia0"}; !slices.Equal(nodes, want) {
			t.Errorf("card device nodes = %q, want %q", nodes, want)
		}
	} else if len(nodes) != 0 {
		t.Errorf("device nodes found without any on disk: %q", nodes)
	}

	common, err := h.CommonEdits()
	if err != nil {
		t.Fatalf("CommonEdits: %v", err)
	}
	var mounts []string
	for _, mnt := range common.Mounts {
		mounts = append(mounts, mnt.ContainerPath)
	}
	if !slices.Contains(mounts, "/usr/lib/x86_64-linux-gnu/libcuda.so."+driverVersion) {
		t.Errorf("common mounts lack libcuda: %q", mounts)
	}
	var ctlNodes []string
	for _, n := range common.DeviceNodes {
		ctlNodes = append(ctlNodes, n.Path)
	}
	if haveNodes && (!slices.Contains(ctlNodes, "/dev/nvidiactl") || !slices.Contains(ctlNodes, "/dev/nvidia-uvm")) {
		t.Errorf("common device nodes = %q, want nvidiactl and nvidia-uvm", ctlNodes)
	}

	// Results are cached and handed out as copies.
	card.DeviceNodes = append(card.DeviceNodes[:0], nil)
	again, err := h.CardEdits(gpu.GPU{Index: 0, UUID: uuids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.DeviceNodes) != len(nodes) || (len(nodes) > 0 && again.DeviceNodes[0] == nil) {
		t.Error("changing returned edits changed the cache")
	}
}

func TestErrors(t *testing.T) {
	m, _ := newMock()
	root := t.TempDir() // no libcuda
	h, err := newWithNVML(context.Background(), Options{DriverRoot: root, DevRoot: root}, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CommonEdits(); err == nil || !strings.Contains(err.Error(), "discovering driver files") ||
		!strings.Contains(err.Error(), "libcuda.so."+driverVersion) {
		t.Errorf("CommonEdits without a driver: %v", err)
	}
	if _, err := h.CardEdits(gpu.GPU{Index: 3}); err == nil || err.Error() != "card 3 has no UUID" {
		t.Errorf("CardEdits without UUID: %v", err)
	}
	if _, err := h.CardEdits(gpu.GPU{Index: 9, UUID: "GPU-unknown"}); err == nil ||
		!strings.HasPrefix(err.Error(), "discovering device nodes of GPU-unknown: ") {
		t.Errorf("CardEdits of an unknown card: %v", err)
	}
	if err := h.Warm(nil); err == nil {
		t.Error("Warm succeeded without a driver")
	}
}

// In the chart's pod the driver root is mounted at /driver-root; the spec
// the host's runtime reads must name the host's paths.
func TestHostDriverRoot(t *testing.T) {
	m, uuids := newMock()
	root, haveNodes := fakeDriverRoot(t)
	const host = "/run/nvidia/driver"
	h, err := newWithNVML(context.Background(), Options{DriverRoot: root, HostDriverRoot: host,
		CDIHookPath: filepath.Join(root, "usr/bin/nvidia-cdi-hook")}, m)
	if err != nil {
		t.Fatal(err)
	}
	card, err := h.CardEdits(gpu.GPU{Index: 0, UUID: uuids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if haveNodes {
		if len(card.DeviceNodes) != 1 || card.DeviceNodes[0].HostPath != host+"/dev/nvidia0" || card.DeviceNodes[0].Path != "/dev/nvidia0" {
			t.Errorf("card device nodes %+v, want /dev/nvidia0 from %s/dev/nvidia0", card.DeviceNodes, host)
		}
	}
	common, err := h.CommonEdits()
	if err != nil {
		t.Fatal(err)
	}
	lib := "/usr/lib/x86_64-linux-gnu/libcuda.so." + driverVersion
	found := false
	for _, mnt := range common.Mounts {
		if strings.HasPrefix(mnt.HostPath, root) {
			t.Errorf("mount %s keeps the plugin's driver root", mnt.HostPath)
		}
		found = found || (mnt.ContainerPath == lib && mnt.HostPath == host+lib)
	}
	if !found {
		t.Errorf("no mount of %s from %s%s in %+v", lib, host, lib, common.Mounts)
	}
	for _, hook := range common.Hooks {
		if hook.Path != host+"/usr/bin/nvidia-cdi-hook" {
			t.Errorf("hook %s, want %s/usr/bin/nvidia-cdi-hook", hook.Path, host)
		}
	}
	if len(common.Hooks) == 0 {
		t.Error("no nvidia-cdi-hook hooks")
	}
}

// TestMockNVMLLibrary runs nvcdi on the C mock libnvidia-ml.so.1 (loaded
// from the driver root by path, as the plugin does) instead of a go-nvml
// mock: every card of the built-in dgx-h100 gets its device node and the
// driver's libraries are found by the version NVML reports.
func TestMockNVMLLibrary(t *testing.T) {
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(mocknvml.EnvDevicesFile, "")
	t.Setenv(mocknvml.EnvStateDir, t.TempDir())
	const version = "580.95.05" // the built-in profile's driver
	root := t.TempDir()
	lib64 := filepath.Join(root, "usr/lib64")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(lib64, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, filepath.Join(lib64, "libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib64, "libcuda.so."+version), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	haveNodes := true
	for minor := uint32(0); minor < 8; minor++ {
		err := unix.Mknod(filepath.Join(root, "dev", fmt.Sprintf("nvidia%d", minor)), unix.S_IFCHR|0o666, int(unix.Mkdev(195, minor)))
		if errors.Is(err, unix.EPERM) {
			haveNodes = false
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := New(context.Background(), Options{DriverRoot: root, NVMLLibrary: filepath.Join(lib64, "libnvidia-ml.so.1"),
		CDIHookPath: "/usr/bin/nvidia-cdi-hook"})
	if err != nil {
		t.Fatal(err)
	}
	var gpus []gpu.GPU
	for i := 0; i < 8; i++ {
		gpus = append(gpus, gpu.GPU{Index: i, UUID: fakegpu.FakeGPUUUID("mock-node", i)})
	}
	if err := h.Warm(gpus); err != nil {
		t.Fatal(err)
	}
	card, err := h.CardEdits(gpus[5])
	if err != nil {
		t.Fatal(err)
	}
	if haveNodes && (len(card.DeviceNodes) != 1 || card.DeviceNodes[0].Path != "/dev/nvidia5") {
		t.Errorf("card 5 device nodes %+v, want /dev/nvidia5", card.DeviceNodes)
	}
	common, err := h.CommonEdits()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range common.Mounts {
		found = found || m.ContainerPath == "/usr/lib64/libcuda.so."+version
	}
	if !found {
		t.Errorf("common edits lack libcuda.so.%s: %+v", version, common.Mounts)
	}
}

// migProcRoot lays out a proc root with the real driver's mig-minors (the
// generator the mock driver root uses, held to the real file by
// pkg/gpu/nvcaps) and a /proc/devices whose nvidia-caps major is 241, as
// on the H200 of docs/gpu-reports/h200-580.159.04-mig-caps.txt.
func migProcRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(nvcaps.MIGMinorsFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, nvcaps.MIGMinorsFile), nvcaps.GenerateMIGMinors(), 0o444); err != nil {
		t.Fatal(err)
	}
	devices := "Character devices:\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n241 nvidia-caps\n\nBlock devices:\n  7 loop\n"
	if err := os.WriteFile(filepath.Join(root, nvcaps.DevicesFile), []byte(devices), 0o444); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestMIGEdits: a MIG device gets its parent card's node as nvcdi finds it
// and its GPU and compute instance's capability nodes with the major of
// /proc/devices and the minors of mig-minors, explicit so that the
// runtime needs no host node; host paths rewritten to the host's driver
// root. Before the plugin built them, nvcdi was asked for the MIG UUID's
// spec and failed without /proc/driver/nvidia-caps/mig-minors.
func TestMIGEdits(t *testing.T) {
	m, uuids := newMock()
	root, haveNodes := fakeDriverRoot(t)
	if !haveNodes {
		t.Log("unprivileged: no /dev/nvidia0 to find; only the errors are checked")
	}
	proc := migProcRoot(t)
	const host = "/run/nvidia/driver"
	gi, ci := 7, 0 // a 1g's first GPU instance ID on H100 and its compute instance
	created := prepared.MIG{Profile: "1g.10gb", Start: 0, GPUInstanceID: &gi, ComputeInstanceID: &ci, UUID: "MIG-1"}
	mode := os.FileMode(0o444)
	tests := []struct {
		name     string
		opts     Options
		mig      prepared.MIG
		want     []cdispec.DeviceNode
		wantErr  []string
		needNode bool
	}{
		{name: "plugin on the host", opts: Options{DriverRoot: root, ProcRoot: proc}, mig: created, needNode: true, want: []cdispec.DeviceNode{
			{Path: "/dev/nvidia0", HostPath: root + "/dev/nvidia0"},
			{Path: "/dev/nvidia-caps/nvidia-cap66", HostPath: root + "/dev/nvidia-caps/nvidia-cap66", Type: "c", Major: 241, Minor: 66, FileMode: &mode},
			{Path: "/dev/nvidia-caps/nvidia-cap67", HostPath: root + "/dev/nvidia-caps/nvidia-cap67", Type: "c", Major: 241, Minor: 67, FileMode: &mode},
		}},
		{name: "host paths of the host's driver root", opts: Options{DriverRoot: root, HostDriverRoot: host, ProcRoot: proc}, mig: created, needNode: true, want: []cdispec.DeviceNode{
			{Path: "/dev/nvidia0", HostPath: host + "/dev/nvidia0"},
			{Path: "/dev/nvidia-caps/nvidia-cap66", HostPath: host + "/dev/nvidia-caps/nvidia-cap66", Type: "c", Major: 241, Minor: 66, FileMode: &mode},
			{Path: "/dev/nvidia-caps/nvidia-cap67", HostPath: host + "/dev/nvidia-caps/nvidia-cap67", Type: "c", Major: 241, Minor: 67, FileMode: &mode},
		}},
		{name: "no mig-minors", opts: Options{DriverRoot: root, ProcRoot: t.TempDir(), ProcRootFlag: "--proc-root"}, mig: created, needNode: true,
			wantErr: []string{"MIG device MIG-1 of card 0", "driver/nvidia-caps/mig-minors: no such file", "NVIDIA kernel module publishes it", "point --proc-root at it"}},
		{name: "not created", opts: Options{DriverRoot: root, ProcRoot: proc}, mig: prepared.MIG{Profile: "1g.10gb"},
			wantErr: []string{"MIG partition 1g.10gb at 0 of card 0 was not created"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := newWithNVML(context.Background(), tc.opts, m)
			if err != nil {
				t.Fatal(err)
			}
			edits, err := h.MIGEdits(gpu.GPU{Index: 0, Minor: 0, UUID: uuids[0]}, tc.mig)
			if !haveNodes && tc.needNode {
				if err == nil || !strings.Contains(err.Error(), "nvcdi found no /dev/nvidia0 for the parent card") {
					t.Errorf("err = %v, want the missing parent node", err)
				}
				return
			}
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []cdispec.DeviceNode
			for _, n := range edits.DeviceNodes {
				c := *n
				if c.Path == "/dev/nvidia0" { // nvcdi's node: its path and host path are what matters here
					c = cdispec.DeviceNode{Path: c.Path, HostPath: c.HostPath}
				}
				got = append(got, c)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("device nodes\n%+v\nwant\n%+v", got, tc.want)
			}
			if len(edits.Hooks)+len(edits.Mounts)+len(edits.Env) != 0 {
				t.Errorf("a MIG device's edits carry more than device nodes: %+v", edits)
			}
		})
	}
}

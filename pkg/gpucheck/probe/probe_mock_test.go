//go:build cgo

package probe

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// smiXML writes what nvidia-smi -q -x would say about cards, in the
// elements the checks read (NVIDIA's nvsmi_device DTD).
func smiXML(driver string, cards []gpu.GPU) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<driver_version>%s</driver_version>\n<cuda_version>13.0</cuda_version>\n", driver)
	for _, c := range cards {
		fmt.Fprintf(&b, "<gpu id=\"0000%s\"><product_name>%s</product_name><product_architecture>%s</product_architecture>"+
			"<mig_mode><current_mig>Disabled</current_mig></mig_mode><uuid>%s</uuid><minor_number>%d</minor_number>"+
			"<pci><pci_bus_id>0000%s</pci_bus_id></pci><fb_memory_usage><total>%d MiB</total></fb_memory_usage>"+
			"<compute_mode>Default</compute_mode></gpu>\n",
			strings.ToUpper(c.PCIBusID), c.ProductName, c.Architecture, c.UUID, c.Minor, strings.ToUpper(c.PCIBusID), c.MemoryBytes>>20)
	}
	b.WriteString("</nvidia_smi_log>\n")
	return b.String()
}

// TestChecksOverMockLibrary runs the checks through the plugin's code on
// go-nvml loading the C mock libnvidia-ml.so.1, with an nvidia-smi that
// prints what the profile's cards are: the driver, inventory, health and
// enforcement checks pass, the CDI check finds the device nodes this
// machine lacks, and the MPS steps are skipped for want of the driver's
// MPS binary, with the reason.
func TestChecksOverMockLibrary(t *testing.T) {
	const node = "gpu-check-node"
	p, err := fakegpu.BuiltinProfile("pcie-l4")
	if err != nil {
		t.Fatal(err)
	}
	mocknvml.UseProfile(t, p, node)
	dir := t.TempDir()
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	cards, err := fakegpu.NewFakeSource(node, p).GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}

	root := filepath.Join(dir, "driver-root")
	for _, d := range []string{"usr/lib64", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(lib, filepath.Join(root, "usr/lib64/libnvidia-ml.so.1")); err != nil {
		t.Fatal(err)
	}
	// nvcdi finds the driver's files by its version, from libcuda.so.<version>.
	libcuda := filepath.Join(root, "usr/lib64", "libcuda.so."+cards[0].DriverVersion)
	if err := os.WriteFile(libcuda, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(libcuda), filepath.Join(root, "usr/lib64/libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	xml := filepath.Join(dir, "smi.xml")
	if err := os.WriteFile(xml, []byte(smiXML(cards[0].DriverVersion, cards)), 0o644); err != nil {
		t.Fatal(err)
	}
	smi := fmt.Sprintf("#!/bin/sh\ncase \"$1\" in -q) cat %s ;; topo) printf '\\tGPU0\\tGPU1\\tGPU2\\tGPU3\\tCPU Affinity\\nGPU0\\t X \\tPHB\\tSYS\\tSYS\\t0\\nGPU1\\tPHB\\t X \\tSYS\\tSYS\\t0\\nGPU2\\tSYS\\tSYS\\t X \\tPHB\\t1\\nGPU3\\tSYS\\tSYS\\tPHB\\t X \\t1\\n' ;; *) exit 2 ;; esac\n", xml)
	if err := os.WriteFile(filepath.Join(root, "usr/bin/nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	// The host's kernel release and a cgroup v2 root without dmem.
	proc := filepath.Join(dir, "proc")
	cgroup := filepath.Join(dir, "cgroup")
	for _, d := range []string{filepath.Join(proc, "sys/kernel"), cgroup} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/osrelease"), []byte("6.18.0-test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cgroup, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dev := migCapsFromRealReading(t, proc)
	out := t.TempDir()
	checks, done := Checks(Config{DriverRoot: root, DevRoot: dev, ProcRoot: proc, CgroupRoot: cgroup, SysfsRoot: filepath.Join(dir, "sys"),
		OutDir: out, WorkDir: t.TempDir(), NVIDIACDIHook: "/nonexistent/nvidia-cdi-hook"})
	var progress bytes.Buffer
	records := gpucheck.Runner{Out: &progress}.Run(context.Background(), checks)
	done()

	want := map[string]struct {
		result gpucheck.Result
		says   string
	}{
		"driver":          {gpucheck.Passed, "NVIDIA L4"},
		"inventory":       {gpucheck.Passed, "4 cards"},
		"reserved memory": {gpucheck.Passed, "every card publishes at most its total − reserved memory: gpu 0: v2 total 24576 MiB"},
		"MIG":             {gpucheck.Skipped, "MIG mode ERROR_NOT_SUPPORTED"},
		"MIG caps":        {gpucheck.Passed, "gpu0/gi0/access: minor 3 as the mock's layout gives"},
		"CDI":             {gpucheck.Failed, "do not exist"},
		"health":          {gpucheck.Passed, "every card registered"},
		"enforcement":     {gpucheck.Passed, "level advisory"},
		// The test's work directory is t.TempDir(), too long for an MPS
		// v3 namespace socket: noted, with the default root's figures.
		"MPS socket paths":      {gpucheck.Passed, "would not fit under this check's work directory"},
		"MPS classic":           {gpucheck.Skipped, "no nvidia-cuda-mps-control"},
		"MPS classic processes": {gpucheck.Skipped, "no nvidia-cuda-mps-control"},
		"MPS v3":                {gpucheck.Skipped, "older than 615"},
		"memory limit":          {gpucheck.Skipped, "older than 615"},
		"settings unchanged":    {gpucheck.Passed, "4 card(s)"},
	}
	if len(records) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(records), len(want), progress.String())
	}
	for _, r := range records {
		key, _, _ := strings.Cut(r.Name, ":")
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected check %q", r.Name)
			continue
		}
		if r.Result != w.result || !strings.Contains(r.Detail, w.says) {
			t.Errorf("%s: %s: %s; want %s saying %q", r.Name, r.Result, r.Detail, w.result, w.says)
		}
	}
	for _, f := range []string{"nvidia-smi-q.xml", "nvidia-smi-topo.txt", "nvml-inventory.json", "nvml-memory.json", "nvml-mig.json", "mig-minors.txt", "cdi-edits.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("artefact %s: %v", f, err)
		}
	}
	if t.Failed() {
		t.Logf("progress:\n%s", progress.String())
	}
}

// TestMIGQueryOverMockLibrary asks the C mock libnvidia-ml the MIG queries
// gpu-check asks a real driver: an H200 in MIG mode answers the guide's
// profiles, each named by the plugin as the mock names it, and matching
// the table; an A100 with MIG off answers none; the check passes.
func TestMIGQueryOverMockLibrary(t *testing.T) {
	p, err := fakegpu.ParseProfile([]byte(`
gpus:
- {index: 0, productName: "NVIDIA H200", memory: 141Gi, pciBusID: "0000:1b:00.0", migType: h200-141gb, migMode: enabled}
- {index: 1, productName: "NVIDIA A100-SXM4-40GB", memory: 40Gi, pciBusID: "0000:1c:00.0", migType: a100-40gb, migMode: disabled}
`))
	if err != nil {
		t.Fatal(err)
	}
	mocknvml.UseProfile(t, p, "mig-node")
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	src, done, err := nvmlgpu.Open(ctx, lib)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cards, err := nvmlgpu.QueryMIG(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 2 {
		t.Fatalf("%d cards, want 2", len(cards))
	}
	answered := 0
	for _, q := range cards[0].Profiles {
		if q.Return == "SUCCESS" {
			answered++
			if q.NVMLName == "" || len(q.Placements) == 0 {
				t.Errorf("H200 profile %d: name %q, placements %v: want both", q.Profile, q.NVMLName, q.Placements)
			}
		}
	}
	if want := len(fakegpu.MIGTable("h200-141gb")); answered != want {
		t.Errorf("H200 answered %d profiles, want the table's %d", answered, want)
	}
	out := gpucheck.MIGOutcome(cards, mockMIGTable)
	if out.Result != gpucheck.Passed || !strings.Contains(out.Detail, "NVML answers 7 profile(s)") || !strings.Contains(out.Detail, "MIG mode off") {
		t.Errorf("outcome %s: %s", out.Result, out.Detail)
	}
}

// migCapsFromRealReading lays out under proc and a new dev root what the
// H200 of docs/gpu-reports/h200-580.159.04-mig-caps.txt showed (driver
// 580.159.04, MIG mode off): the real mig-minors (nvcaps.GenerateMIGMinors,
// held to its sha256), /proc/devices' nvidia lines, mig/config and
// mig/monitor, and /dev/nvidia-caps/nvidia-cap1 and 2 (241:1, 241:2),
// where the test may make device nodes. It returns the dev root.
func migCapsFromRealReading(t *testing.T, proc string) string {
	t.Helper()
	files := map[string]string{
		nvcaps.MIGMinorsFile:                     string(nvcaps.GenerateMIGMinors()),
		nvcaps.DevicesFile:                       "Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n239 nvidia-nvswitch\n240 nvidia-nvlink\n241 nvidia-caps\n242 nvidia-caps-imex-channels\n\nBlock devices:\n  7 loop\n",
		"driver/nvidia/capabilities/mig/config":  "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
		"driver/nvidia/capabilities/mig/monitor": "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
	}
	for name, data := range files {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	dev := t.TempDir()
	caps := filepath.Join(dev, "dev/nvidia-caps")
	if err := os.MkdirAll(caps, 0o755); err != nil {
		t.Fatal(err)
	}
	for minor, mode := range map[uint32]uint32{1: 0o400, 2: 0o444} {
		if err := unix.Mknod(filepath.Join(caps, fmt.Sprintf("nvidia-cap%d", minor)), unix.S_IFCHR|mode, int(unix.Mkdev(241, minor))); err != nil {
			t.Logf("no device nodes made (%v): the check notes them missing", err)
			break
		}
	}
	return dev
}

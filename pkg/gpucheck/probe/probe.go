// Package probe runs gpu-check's checks on a GPU machine through the
// plugin's own code: NVML inventory (pkg/gpu/nvmlgpu), CDI generation
// (pkg/plugin/cdi/nvidia), health registration, enforcement detection
// (pkg/plugin/enforcement) and the MPS sequence of a prepare
// (pkg/plugin/mps, pkg/plugin/cdi). What is judged lives in pkg/gpucheck;
// this package only reads the machine and runs programs. It reads the
// GPU's settings and never changes them.
package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
	"github.com/tangram-gpu/tangram/pkg/gpucheck"
	"github.com/tangram-gpu/tangram/pkg/gpucheck/nvidiasmi"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi/nvidia"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// Config says where things are on the machine and in the bundle.
type Config struct {
	// DriverRoot is where the driver is installed: / or /usr/local/nvidia.
	DriverRoot string
	// DevRoot is where /dev is (default /).
	DevRoot string
	// ProcRoot, CgroupRoot and SysfsRoot default to /proc, /sys/fs/cgroup, /sys.
	ProcRoot, CgroupRoot, SysfsRoot string
	// CUDAAlloc is the bundle's client program (hack/gpu-acceptance/cuda-alloc).
	CUDAAlloc string
	// NVIDIACDIHook is nvidia-cdi-hook as the CDI specs should name it.
	NVIDIACDIHook string
	// TangramCDIHook is the bundle's tangram-cdi-hook.
	TangramCDIHook string
	// WorkDir holds the private MPS directories and scratch files; it must
	// exist and be empty of anything else the check could collide with.
	WorkDir string
	// OutDir receives the artefacts (nvidia-smi output, CDI edits).
	OutDir string
	// ShareMiB is the memory limit of the MPS clients (default 2048).
	ShareMiB int64
}

func (c *Config) defaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.DriverRoot, "/")
	def(&c.DevRoot, "/")
	def(&c.ProcRoot, "/proc")
	def(&c.CgroupRoot, "/sys/fs/cgroup")
	def(&c.SysfsRoot, "/sys")
	if c.ShareMiB == 0 {
		c.ShareMiB = 2048
	}
}

// state is what earlier checks found, for the later ones.
type state struct {
	cfg   Config
	root  driverroot.Root
	smi   string // nvidia-smi
	facts gpucheck.Facts
	// smiOK: nvidia-smi -q -x was read.
	smiOK bool
	ref   gpucheck.Reference
	cards []gpu.GPU
	src   gpu.Source
	close func()
	// settingsBefore are compute and MIG modes by UUID at the start.
	settingsBefore map[string]string
	// holdSeconds is how long the classic check's first client holds its
	// context at most (0: 30 s); it is ended once the second has run.
	holdSeconds int
}

// Checks returns the checks in the order they run, and a function to call
// when they are done (it shuts NVML down).
func Checks(cfg Config) ([]gpucheck.Check, func()) {
	cfg.defaults()
	s := &state{cfg: cfg, root: driverroot.Root{Path: cfg.DriverRoot}, close: func() {}}
	checks := []gpucheck.Check{
		{Name: "driver: nvidia-smi report and GPU settings", Timeout: 45 * time.Second, Run: s.checkSMI},
		{Name: "inventory: NVML (pkg/gpu/nvmlgpu) against nvidia-smi", Timeout: 45 * time.Second, Run: s.checkInventory},
		{Name: "reserved memory: NVML v2 total, reserved, free, used per card against the memory the plugin publishes (read only)", Timeout: 15 * time.Second, Run: s.checkReservedMemory},
		{Name: "MIG: NVML's profiles and placements against the mock's tables (read only)", Timeout: 30 * time.Second, Run: s.checkMIG},
		{Name: "MIG caps: mig-minors, /proc/devices and /dev/nvidia-caps as the plugin reads them (read only)", Timeout: 15 * time.Second, Run: s.checkMIGCaps},
		{Name: "CDI: nvcdi edits against the driver root", Timeout: 60 * time.Second, Run: s.checkCDI},
		{Name: "health: NVML event registration of the monitor", Timeout: 30 * time.Second, Run: s.checkHealth},
		{Name: "enforcement: detected level and reasons", Timeout: 15 * time.Second, Run: s.checkEnforcement},
		{Name: "MPS socket paths: the longest control and v3 namespace socket under the chart's default MPS root and under this check's own fit in 107 bytes (read only)", Timeout: 5 * time.Second, Run: s.checkSocketPaths},
		{Name: "MPS classic: private multi-user daemon, a share's container view, two users, pinned limit, teardown", Timeout: 150 * time.Second, Run: s.checkClassicMPS},
		{Name: "MPS classic processes: NVML's compute and MPS process lists while two clients of a private daemon hold memory (read only)", Timeout: 120 * time.Second, Run: s.checkMPSProcesses},
		{Name: "MPS v3: a namespace per client, limits, teardown", Timeout: 150 * time.Second, Run: s.checkV3},
		{Name: "memory limit: tangram-cdi-hook on a scratch cgroup", Timeout: 90 * time.Second, Run: s.checkMemoryLimitHook},
		{Name: "settings unchanged: compute mode and MIG as found", Timeout: 30 * time.Second, Run: s.checkSettingsUnchanged},
	}
	return checks, func() { s.close() }
}

// Machine describes the machine for the report, from what the checks read.
func Machine(cfg Config) gpucheck.Machine {
	cfg.defaults()
	m := gpucheck.Machine{DriverRoot: cfg.DriverRoot}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile(filepath.Join(cfg.ProcRoot, "sys/kernel/osrelease")); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	smi, err := driverroot.Root{Path: cfg.DriverRoot}.Executable("nvidia-smi")
	if err != nil {
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "-q", "-x").Output()
	if err != nil {
		return m
	}
	rep, err := nvidiasmi.Parse(bytes.NewReader(out))
	if err != nil {
		return m
	}
	m.DriverVersion, m.CUDAVersion = rep.DriverVersion, rep.CUDAVersion
	for _, c := range rep.Cards {
		m.GPUs = append(m.GPUs, strings.TrimSpace(c.ProductName))
	}
	return m
}

func (s *state) writeArtefact(name string, data []byte) {
	if s.cfg.OutDir == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(s.cfg.OutDir, name), data, 0o644)
}

func (s *state) checkSMI(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	smi, err := s.root.Executable("nvidia-smi")
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	s.smi = smi
	progress("running %s -q -x", smi)
	out, err := exec.CommandContext(ctx, smi, "-q", "-x").Output()
	if err != nil {
		return gpucheck.Fail("%s -q -x: %v", smi, exitDetail(err))
	}
	s.writeArtefact("nvidia-smi-q.xml", out)
	rep, err := nvidiasmi.Parse(bytes.NewReader(out))
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	s.ref.SMI = rep
	s.smiOK = true
	progress("running %s topo -m", smi)
	if topo, err := exec.CommandContext(ctx, smi, "topo", "-m").Output(); err == nil {
		s.writeArtefact("nvidia-smi-topo.txt", topo)
		if t, err := nvidiasmi.ParseTopology(bytes.NewReader(topo)); err == nil {
			s.ref.Topology = t
		} else {
			progress("nvidia-smi topo -m unreadable: %v", err)
		}
	}
	s.ref.NUMA = map[string]int{}
	for _, c := range rep.Cards {
		b, err := os.ReadFile(filepath.Join(s.cfg.SysfsRoot, "bus/pci/devices", c.BusID(), "numa_node"))
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			s.ref.NUMA[c.BusID()] = n
		}
	}
	s.facts = s.readFacts(rep)
	s.settingsBefore = settings(rep)
	var cards []string
	for _, c := range rep.Cards {
		cards = append(cards, fmt.Sprintf("%s %s (compute mode %s, MIG %s)", strings.TrimSpace(c.ProductName), c.UUID, c.ComputeMode, orNA(c.MIGMode)))
	}
	return gpucheck.Pass("driver %s, CUDA %s: %s", rep.DriverVersion, rep.CUDAVersion, strings.Join(cards, "; "))
}

func (s *state) readFacts(rep nvidiasmi.Report) gpucheck.Facts {
	f := gpucheck.Facts{DriverVersion: rep.DriverVersion, Cards: rep.Cards}
	if b, err := os.ReadFile(filepath.Join(s.cfg.ProcRoot, "sys/kernel/osrelease")); err == nil {
		f.KernelRelease = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(s.cfg.CgroupRoot, "cgroup.controllers")); err == nil {
		f.CgroupV2 = true
		f.RootControllers = strings.Fields(string(b))
		if b, err := os.ReadFile(filepath.Join(s.cfg.CgroupRoot, "cgroup.subtree_control")); err == nil {
			f.RootSubtree = strings.Fields(string(b))
		}
	}
	if p, err := s.root.Executable(driverroot.MPSControl); err == nil {
		f.MPSControl = p
	}
	for _, dir := range driverroot.LibraryDirs {
		p := filepath.Join(s.cfg.DriverRoot, dir, "libcuda.so.1")
		if _, err := os.Stat(p); err == nil {
			f.CUDADriver = p
			break
		}
	}
	return f
}

func settings(rep nvidiasmi.Report) map[string]string {
	out := map[string]string{}
	for _, c := range rep.Cards {
		out[strings.TrimSpace(c.UUID)] = fmt.Sprintf("compute mode %s, MIG %s", strings.TrimSpace(c.ComputeMode), orNA(c.MIGMode))
	}
	return out
}

func orNA(s string) string {
	if strings.TrimSpace(s) == "" {
		return "N/A"
	}
	return strings.TrimSpace(s)
}

// openNVML opens the plugin's NVML source once.
func (s *state) openNVML(ctx context.Context) (gpu.Source, error) {
	if s.src != nil {
		return s.src, nil
	}
	lib, err := s.root.NVMLLibraryPath()
	if err != nil {
		return nil, err
	}
	// NVML outlives this check's context: later checks use it too.
	src, done, err := nvmlgpu.Open(klog.NewContext(context.WithoutCancel(ctx), klog.FromContext(ctx)), lib)
	if err != nil {
		return nil, err
	}
	s.src, s.close = src, done
	return src, nil
}

func (s *state) needSMI() (gpucheck.Outcome, bool) {
	if !s.smiOK {
		return gpucheck.Skip("needs nvidia-smi's report, which the first check could not read"), false
	}
	return gpucheck.Outcome{}, true
}

func (s *state) checkInventory(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needSMI(); !ok {
		return out
	}
	progress("opening NVML under %s", s.cfg.DriverRoot)
	src, err := s.openNVML(ctx)
	if err != nil {
		return gpucheck.Fail("opening NVML: %v", err)
	}
	cards, err := src.GPUs(ctx)
	if err != nil {
		return gpucheck.Fail("listing GPUs through NVML: %v", err)
	}
	s.cards = cards
	if b, err := json.MarshalIndent(cards, "", "  "); err == nil {
		s.writeArtefact("nvml-inventory.json", b)
	}
	return gpucheck.InventoryOutcome(cards, s.ref)
}

// checkReservedMemory asks NVML each card's memory, v2 (total, reserved,
// free, used) and v1, and sets it beside the memory capacity the plugin
// publishes for the card: resourceslices.Devices over the inventory's
// cards, as the slices subcommand builds them (sharing on, the default
// memory step). Queries only.
func (s *state) checkReservedMemory(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	progress("asking NVML each card's memory: nvmlDeviceGetMemoryInfo_v2 and nvmlDeviceGetMemoryInfo (queries only)")
	cards, err := nvmlMemory(s.src)
	if err != nil {
		return gpucheck.Fail("reading the cards' memory through NVML: %v", err)
	}
	progress("building the devices the plugin publishes (pkg/resourceslices, sharing on, default memory step)")
	devs, err := resourceslices.Devices(s.cards, resourceslices.Options{NodeName: "gpu-check", Sharing: true, Logger: klog.FromContext(ctx)})
	if err != nil {
		return gpucheck.Fail("building the plugin's devices: %v", err)
	}
	byName := map[string]*resourceapi.Device{}
	for i := range devs {
		byName[devs[i].Name] = &devs[i]
	}
	for i, c := range cards {
		for _, g := range s.cards {
			if g.UUID != c.UUID {
				continue
			}
			if d, ok := byName[device.CardDeviceName(g.Index)]; ok {
				if m, ok := d.Capacity[device.CapacityMemory]; ok {
					cards[i].Published = m.Value.Value()
				}
				cards[i].PublishedMax = device.AllocatableMemory(d)
			}
		}
	}
	if b, err := json.MarshalIndent(cards, "", "  "); err == nil {
		s.writeArtefact("nvml-memory.json", b)
	}
	return gpucheck.MemoryOutcome(cards)
}

func (s *state) checkMIG(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	progress("asking NVML each card's MIG mode, profiles and placements (queries only)")
	cards, err := nvmlgpu.QueryMIG(s.src)
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	if b, err := json.MarshalIndent(cards, "", "  "); err == nil {
		s.writeArtefact("nvml-mig.json", b)
	}
	return gpucheck.MIGOutcome(cards, mockMIGTable)
}

// mockMIGTable is the mock's MIG table (pkg/gpu/fakegpu, from NVIDIA's MIG
// user guide) for a card of this product name and memory, if it has one.
func mockMIGTable(product string, memoryMiB int64) (gpucheck.MIGExpectation, bool) {
	gib := (memoryMiB + 1023) >> 10
	var migType string
	switch {
	case strings.Contains(product, "A100") && gib <= 48:
		migType = "a100-40gb"
	case strings.Contains(product, "A100"):
		migType = "a100-80gb"
	case strings.Contains(product, "H100") && gib <= 84:
		migType = "h100-80gb"
	case strings.Contains(product, "H200") && gib >= 130 && gib <= 150:
		migType = "h200-141gb"
	default:
		return gpucheck.MIGExpectation{}, false
	}
	return gpucheck.MIGExpectation{Name: migType, Profiles: fakegpu.MIGProfiles(migType)}, true
}

// checkMIGCaps reads the kernel module's MIG capability files and
// /dev/nvidia-caps (nothing else: no node is created, nothing on the GPU
// changes) and judges them with the parser the plugin builds a MIG
// device's CDI nodes with (pkg/gpu/nvcaps).
func (s *state) checkMIGCaps(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	proc := s.cfg.ProcRoot
	progress("reading %s, %s and %s", filepath.Join(proc, nvcaps.MIGMinorsFile), filepath.Join(proc, nvcaps.DevicesFile), filepath.Join(proc, nvcaps.MIGCapabilitiesDir))
	var r gpucheck.MIGCapsReading
	r.MIGMinors, r.MIGMinorsErr = os.ReadFile(filepath.Join(proc, nvcaps.MIGMinorsFile))
	r.Devices, r.DevicesErr = os.ReadFile(filepath.Join(proc, nvcaps.DevicesFile))
	r.CapFiles, r.CapFileErrs = map[nvcaps.Cap][]byte{}, map[nvcaps.Cap]error{}
	for _, c := range []nvcaps.Cap{nvcaps.ConfigCap, nvcaps.MonitorCap} {
		r.CapFiles[c], r.CapFileErrs[c] = os.ReadFile(filepath.Join(proc, nvcaps.MIGCapabilitiesDir, string(c)))
	}
	r.Nodes = map[string]gpucheck.CapNode{}
	dir := filepath.Join(s.cfg.DevRoot, nvcaps.CapsDir)
	entries, _ := os.ReadDir(dir) // none: the judgment says which node is missing
	for _, e := range entries {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			continue
		}
		r.Nodes[filepath.Join(nvcaps.CapsDir, e.Name())] = gpucheck.CapNode{Char: st.Mode&unix.S_IFMT == unix.S_IFCHR,
			Major: unix.Major(uint64(st.Rdev)), Minor: unix.Minor(uint64(st.Rdev))}
	}
	for _, g := range s.cards {
		if g.Index == 0 {
			minor := g.Minor
			r.Card0Minor = &minor
		}
	}
	if len(r.MIGMinors) > 0 {
		s.writeArtefact("mig-minors.txt", r.MIGMinors)
	}
	return gpucheck.MIGCapsOutcome(r)
}

func (s *state) needCards() (gpucheck.Outcome, bool) {
	if len(s.cards) == 0 {
		// The failure is counted once, where it happened.
		return gpucheck.Skip("needs the NVML inventory, which the inventory check could not read"), false
	}
	return gpucheck.Outcome{}, true
}

func (s *state) checkCDI(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	lib, err := s.root.NVMLLibraryPath()
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	hook := s.cfg.NVIDIACDIHook
	if hook == "" {
		if p, err := s.root.Executable(driverroot.NVIDIACDIHook); err == nil {
			hook = p
		}
	}
	progress("generating CDI edits with nvcdi (driver root %s, dev root %s, hook %s)", s.cfg.DriverRoot, s.cfg.DevRoot, hook)
	hw, err := nvidia.New(ctx, nvidia.Options{DriverRoot: s.cfg.DriverRoot, DevRoot: s.cfg.DevRoot, CDIHookPath: hook, NVMLLibrary: lib})
	if err != nil {
		return gpucheck.Fail("creating the CDI generator: %v", err)
	}
	common, err := hw.CommonEdits()
	if err != nil {
		return gpucheck.Fail("common edits: %v", err)
	}
	all := map[string]cdispec.ContainerEdits{"common": common}
	edits := []cdispec.ContainerEdits{common}
	for _, g := range s.cards {
		e, err := hw.CardEdits(g)
		if err != nil {
			return gpucheck.Fail("edits of card %d (%s): %v", g.Index, g.UUID, err)
		}
		all[g.UUID] = e
		edits = append(edits, e)
	}
	if b, err := json.MarshalIndent(all, "", "  "); err == nil {
		s.writeArtefact("cdi-edits.json", b)
	}
	return gpucheck.SpecPathsOutcome(len(s.cards), gpucheck.SpecPaths(edits...), exists)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func exitDetail(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err.Error()
}

func (s *state) checkHealth(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	prober, ok := s.src.(gpu.HealthProber)
	if !ok {
		return gpucheck.Fail("the NVML source cannot probe health registration (internal error)")
	}
	progress("registering an NVML event set for %s and %s", nvmlgpu.EventNameXidCriticalError, nvmlgpu.EventNameGpuRecoveryAction)
	regs, err := prober.ProbeHealth(ctx)
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	return gpucheck.HealthOutcome(regs, len(s.cards), nvmlgpu.EventNameXidCriticalError)
}

// detectEnforcement is the plugin's detection, as the slices and run
// subcommands call it (cmd/dra-kubelet-plugin deviceModelFlags.Enforcement).
// The NVML source answers detection's driver questions (the memory-limit
// symbol, MIG modes); a bare machine has no kubelet, so the pods cgroup is
// whichever of kubepods.slice or kubepods exists, as the plugin's default.
func (s *state) detectEnforcement(ctx context.Context) gpucheck.Detected {
	versions := make([]string, len(s.cards))
	for i, g := range s.cards {
		versions[i] = g.DriverVersion
	}
	driver, _ := s.src.(enforcement.Driver)
	c := enforcement.ForNode(ctx, false, versions, driver, enforcement.Host{ProcRoot: s.cfg.ProcRoot, CgroupRoot: s.cfg.CgroupRoot})
	reason := c.Reason
	if c.ReasonCode != "" {
		reason = fmt.Sprintf("%s (%s)", c.Reason, c.ReasonCode)
	}
	return gpucheck.Detected{Level: string(c.Level), Reason: reason, DriverMajor: c.DriverMajor,
		KernelMajor: c.KernelMajor, KernelMinor: c.KernelMinor, CgroupV2: c.CgroupV2, Dmem: c.Dmem}
}

func (s *state) checkEnforcement(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	progress("detecting share enforcement from %s and %s", s.cfg.ProcRoot, s.cfg.CgroupRoot)
	return gpucheck.EnforcementOutcome(s.detectEnforcement(ctx), s.facts)
}

func (s *state) checkSettingsUnchanged(ctx context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needSMI(); !ok {
		return out
	}
	out, err := exec.CommandContext(ctx, s.smi, "-q", "-x").Output()
	if err != nil {
		return gpucheck.Fail("%s -q -x: %v", s.smi, exitDetail(err))
	}
	rep, err := nvidiasmi.Parse(bytes.NewReader(out))
	if err != nil {
		return gpucheck.Fail("%v", err)
	}
	return gpucheck.SettingsOutcome(s.settingsBefore, settings(rep))
}

//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// The real-GPU path (label realpath, `make test-e2e-realpath`): the chart's
// cgo kubelet plugin over the mock driver root of hack/mock-driver-root,
// NVML from the mock libnvidia-ml.so.1, nvcdi and the stand-in MPS control.
// These specs run on the GPU node itself: they read the mock library's call
// log, the stand-in's control.log, the CDI specs and the containers' root
// file systems on the host.
var (
	mockDriverRoot   = flag.String("mock-driver-root", "", "realpath specs: the host path of the mock NVIDIA driver root the chart's driverRoot names (hack/mock-driver-root)")
	mockNVMLStateDir = flag.String("mock-nvml-state-dir", "", "realpath specs: the host directory of the mock NVML library's calls.log (TANGRAM_MOCK_NVML_STATE_DIR of the plugin)")
	mpsRoot          = flag.String("mps-root", "", "realpath specs: the host's MPS root of the plugin (chart kubeletPlugin.hostPaths.mpsRoot)")
	releaseNamespace = flag.String("release-namespace", "tangram-system", "realpath specs: namespace of the Helm release whose plugin pods run on the GPU node")
	pluginImage      = flag.String("plugin-image", "localhost/tangram/dra-kubelet-plugin:dev", "realpath specs: the cgo kubelet plugin image the chart must run")
)

const (
	realPathLabel        = "realpath"
	mockProfileMarker    = "TANGRAM-MOCK-DRIVER-ROOT"
	pluginComponentLabel = "app.kubernetes.io/component=kubelet-plugin"
	exclusiveProcessMode = "EXCLUSIVE_PROCESS"
	setComputeModeCall   = "nvmlDeviceSetComputeMode"
)

var _ = Describe("Real GPU path", Label(realPathLabel), Ordered, ContinueOnFailure, func() {
	var marker map[string]string // the mock root's marker: profile, node, driver_version, ...

	BeforeAll(func(ctx SpecContext) {
		Expect(*mockDriverRoot).NotTo(BeEmpty(), "pass --mock-driver-root (make test-e2e-realpath does)")
		Expect(*mockNVMLStateDir).NotTo(BeEmpty(), "pass --mock-nvml-state-dir")
		Expect(*mpsRoot).NotTo(BeEmpty(), "pass --mps-root")
		Expect(*cdiDir).NotTo(BeEmpty(), "pass --cdi-dir: the realpath specs read the CDI specs on the GPU node")
		marker = readMarker(filepath.Join(*mockDriverRoot, mockProfileMarker))
		Expect(marker).To(HaveKey("profile"))
		Expect(marker).To(HaveKey("driver_version"))
		Expect(marker).To(HaveKeyWithValue("node", gpuNode), "the mock driver root serves the UUIDs of another node")
		for _, f := range []string{"usr/lib64/libnvidia-ml.so.1", "usr/bin/nvidia-cuda-mps-control", "usr/bin/nvidia-cdi-hook"} {
			_, err := os.Stat(filepath.Join(*mockDriverRoot, f))
			Expect(err).NotTo(HaveOccurred(), "the mock driver root lacks %s", f)
		}
	})

	It("runs the cgo plugin image from the chart, on NVML of the mock driver root, with no fake profile", func(ctx SpecContext) {
		scenario("real path preflight: the plugin pod's image, flags and the driver version NVML reports")
		pod := pluginPod(ctx)
		c := pod.Spec.Containers[0]
		Expect(c.Image).To(Equal(*pluginImage), "the plugin pod must run the cgo image")
		args := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
		Expect(args).NotTo(ContainSubstring("--fake-profile"), "the plugin must discover the cards through NVML")
		Expect(args).To(ContainSubstring("--host-driver-root=" + *mockDriverRoot))
		// Only NVML knows the driver version: a plugin without cgo or without
		// the mock library publishes nothing.
		devices := nodeDevices(ctx, gpuNode)
		Expect(devices).NotTo(BeEmpty())
		for name, d := range devices {
			Expect(versionAttr(d, device.AttrDriverVersion)).To(Equal(semverOf(marker["driver_version"])),
				"device %s: driverVersion must be the one the mock library reports", name)
		}
		GinkgoWriter.Printf("  plugin pod %s runs %s; %d cards, driver %s from NVML\n", pod.Name, c.Image, len(devices), marker["driver_version"])
	})

	It("publishes from NVML the ResourceSlices the fake profile gives for the same cards, plus pcieRoot from sysfs", func(ctx SpecContext) {
		scenario("real path: ResourceSlices from NVML equal the fake profile's, pcieRoot from the mock sysfs")
		profile, err := fakegpu.BuiltinProfile(marker["profile"])
		Expect(err).NotTo(HaveOccurred(), "the mock driver root serves profile %q", marker["profile"])
		cards, err := fakegpu.NewFakeSource(gpuNode, profile).GPUs(ctx)
		Expect(err).NotTo(HaveOccurred())
		// The mock root may serve another driver than the profile's
		// (TANGRAM_MOCK_NVML_DRIVER_VERSION, 615 in the realpath stage).
		for i := range cards {
			cards[i].DriverVersion = marker["driver_version"]
		}
		want, err := resourceslices.Devices(cards, resourceslices.Options{NodeName: gpuNode, Sharing: true, ShareEnforcement: marker["share_enforcement"],
			ShareBackend: device.ShareBackendMPS})
		Expect(err).NotTo(HaveOccurred())

		got := nodeDevices(ctx, gpuNode)
		Expect(got).To(HaveLen(len(want)))
		pcieRoot := resourceapi.QualifiedName("resource.kubernetes.io/pcieRoot")
		pciBusID := resourceapi.QualifiedName("resource.kubernetes.io/pciBusID")
		for _, w := range want {
			g, ok := got[w.Name]
			Expect(ok).To(BeTrue(), "device %s of the fake profile is not published", w.Name)
			g = *g.DeepCopy()
			Expect(g.Attributes).To(HaveKey(pciBusID), "device %s", w.Name)
			root := g.Attributes[pcieRoot].StringValue
			Expect(root).NotTo(BeNil(), "device %s has no pcieRoot", w.Name)
			Expect(*root).To(Equal(sysfsPCIeRoot(*g.Attributes[pciBusID].StringValue)), "device %s: pcieRoot must be the mock sysfs's", w.Name)
			delete(g.Attributes, pcieRoot)
			Expect(apiequality.Semantic.DeepEqual(g, w)).To(BeTrue(),
				"device %s from NVML differs from the fake profile's:\n got: %s\nwant: %s", w.Name, toJSON(g), toJSON(w))
			GinkgoWriter.Printf("  %s: %d attributes, %d capacities, nvlinkDomain %q, pcieRoot %s\n",
				w.Name, len(w.Attributes), len(w.Capacity), stringAttr(g, device.AttrNVLinkDomain), *root)
		}
	})

	It("gives a whole-card pod its /dev/nvidiaN and the driver files nvcdi found", func(ctx SpecContext) {
		scenario("real path: a whole card's device node and driver files inside the container")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "one-gpu", wholeGPUs(1))
		createPod(ctx, gpuPod(ns, "whole", "one-gpu"))
		report := waitRunning(ctx, ns, "whole")
		printPodOutput(ctx, ns, "whole")
		claim := allocatedClaim(ctx, ns, "whole")
		res := results(claim)
		Expect(res).To(HaveLen(1))
		dev := nodeDevices(ctx, gpuNode)[res[0].Device]
		minor := dev.Attributes[resourceapi.QualifiedName(device.DriverName+"/"+device.AttrMinor)].IntValue
		if minor == nil {
			minor = dev.Attributes[resourceapi.QualifiedName(device.AttrMinor)].IntValue
		}
		Expect(minor).NotTo(BeNil(), "device %s has no minor attribute", res[0].Device)
		cardNode := "/dev/nvidia" + strconv.FormatInt(*minor, 10)

		Expect(strings.Split(report["DEVICE_NODES"], ",")).To(ContainElement(cardNode), "the container must see its card's device node")
		for _, n := range strings.Split(report["DEVICE_NODES"], ",") {
			if isCardNode(n) {
				Expect(n).To(Equal(cardNode), "the container sees another card's device node")
			}
		}

		edits := claimSpecEdits(string(claim.UID))
		Expect(edits.DeviceNodes).To(ContainElement(HaveField("Path", cardNode)))
		Expect(edits.DeviceNodes).To(ContainElement(HaveField("Path", "/dev/nvidiactl")))
		var libs []string
		claimShm := filepath.Join(*mpsRoot, "claims", string(claim.UID), "shm")
		for _, m := range edits.Mounts {
			if m.ContainerPath == "/dev/shm" {
				// The claim's own /dev/shm (docs/prepare.md), not a driver file.
				Expect(m.HostPath).To(Equal(claimShm), "the claim's /dev/shm")
				continue
			}
			Expect(m.HostPath).To(HavePrefix(*mockDriverRoot+"/"), "mount %s must come from the driver root", m.ContainerPath)
			libs = append(libs, filepath.Base(m.ContainerPath))
		}
		Expect(edits.Mounts).To(ContainElement(HaveField("ContainerPath", "/dev/shm")), "a whole card's claim mounts its own /dev/shm too")
		Expect(libs).To(ContainElements("libnvidia-ml.so."+marker["driver_version"], "libcuda.so."+marker["driver_version"]),
			"nvcdi must mount the driver's NVML and CUDA libraries")
		Expect(edits.Hooks).NotTo(BeEmpty(), "nvcdi's specs run nvidia-cdi-hook")
		for _, h := range edits.Hooks {
			Expect(h.Path).To(Equal(filepath.Join(*mockDriverRoot, "usr/bin/nvidia-cdi-hook")))
		}

		// Inside the container: its root file system, seen through its process.
		root := containerRoot(containerID(ctx, ns, "whole"))
		for _, n := range edits.DeviceNodes {
			fi, err := os.Stat(filepath.Join(root, n.Path))
			Expect(err).NotTo(HaveOccurred(), "device node %s in the container", n.Path)
			Expect(fi.Mode()&os.ModeCharDevice).NotTo(BeZero(), "%s must be a character device", n.Path)
		}
		for _, m := range edits.Mounts {
			_, err := os.Stat(filepath.Join(root, m.ContainerPath))
			Expect(err).NotTo(HaveOccurred(), "driver file %s in the container", m.ContainerPath)
		}
		GinkgoWriter.Printf("  container sees %s, %d device nodes and %d driver files: %s\n", cardNode, len(edits.DeviceNodes), len(libs), strings.Join(libs, " "))
	}, SpecTimeout(4*time.Minute))

	It("switches a shared card to EXCLUSIVE_PROCESS, reaches the stand-in MPS daemon, and keeps the share through a plugin pod restart", func(ctx SpecContext) {
		scenario("real path: a share's compute mode and MPS daemon, then the plugin pod is deleted under it")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-10gi", memoryShare("10Gi"))
		createPod(ctx, gpuPod(ns, "share", "share-10gi"))
		report := waitRunning(ctx, ns, "share")
		printPodOutput(ctx, ns, "share")
		claim := allocatedClaim(ctx, ns, "share")
		res := results(claim)
		Expect(res).To(HaveLen(1))
		uuid := stringAttr(nodeDevices(ctx, gpuNode)[res[0].Device], device.AttrUUID)
		Expect(report).To(HaveKeyWithValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", uuid+"=10240M"))

		state := mocknvml.State{Dir: *mockNVMLStateDir}
		Expect(lastComputeMode(state, uuid)).To(Equal(exclusiveProcessMode), "the plugin must switch the shared card to EXCLUSIVE_PROCESS through NVML")
		// The chart runs MPS v3 here: the share's pipe directory is its
		// claim's namespace directory under the node daemon's. Ask the
		// daemon what an admin would, through the driver root's own
		// nvidia-cuda-mps-control (the stand-in).
		layout := daemon.Layout{Root: *mpsRoot}
		Expect(report["CUDA_MPS_PIPE_DIRECTORY"]).To(Equal(mps.NamespacePipeDir(layout, mpsv3.DefaultServer, string(claim.UID))),
			"the share must be pointed at its own MPS v3 namespace")
		pipeDir := layout.PipeDir()
		logDir := layout.LogDir()
		mpsControl(ctx, pipeDir, "server", "list", "--format=csv")
		commands, err := standin.Commands(logDir)
		Expect(err).NotTo(HaveOccurred(), "the stand-in MPS daemon's control.log")
		Expect(commands).To(ContainElement("server list --format=csv"), "the stand-in MPS daemon on the share's pipe directory did not get the command")
		GinkgoWriter.Printf("  %s: compute mode %s in calls.log; the stand-in MPS daemon on %s logged %q\n", uuid, exclusiveProcessMode, pipeDir, commands)

		daemon := mpsDaemonPod(ctx)
		shareContainer := containerID(ctx, ns, "share")
		old := pluginPod(ctx)

		By("deleting the plugin pod")
		Expect(clientset.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		Eventually(func(g Gomega) {
			p := pluginPodOrNil(ctx, g)
			g.Expect(p).NotTo(BeNil(), "no plugin pod on %s", gpuNode)
			g.Expect(p.UID).NotTo(Equal(old.UID), "the old plugin pod is still there")
			g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty())
			g.Expect(p.Status.ContainerStatuses[0].Ready).To(BeTrue(), "the new plugin pod is not ready")
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(pollEvery).Should(Succeed())
		expectUntouched(ctx, ns, map[string]string{"share": shareContainer}, 10*time.Second)

		Expect(lastComputeMode(state, uuid)).To(Equal(exclusiveProcessMode), "the restarted plugin must leave the shared card in EXCLUSIVE_PROCESS")
		now := mpsDaemonPod(ctx)
		Expect(now.UID).To(Equal(daemon.UID), "the MPS daemon pod must survive the plugin's restart")
		Expect(now.Status.ContainerStatuses).NotTo(BeEmpty())
		Expect(now.Status.ContainerStatuses[0].RestartCount).To(BeZero(), "the MPS daemon restarted")
		mpsControl(ctx, pipeDir, "server", "list", "--format=csv")
		after, err := standin.Commands(logDir)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(after)).To(BeNumerically(">", len(commands)), "the stand-in MPS daemon no longer answers after the plugin's restart: %q", after)
		Expect(after[:len(commands)]).To(Equal(commands), "the stand-in's log must continue, not start over")
		Expect(after[len(commands):]).NotTo(ContainElement(HavePrefix("quit")), "the stand-in MPS daemon was told to quit under a running share")
		Expect(after[len(after)-1]).To(Equal("server list --format=csv"), "the stand-in MPS daemon must still answer on the share's pipe directory")

		By("a new share is prepared by the restarted plugin on the same daemon")
		createPod(ctx, gpuPod(ns, "share-after", "share-10gi"))
		waitRunning(ctx, ns, "share-after")
		GinkgoWriter.Printf("  share kept container %s through the plugin pod's restart; MPS daemon pod %s kept; a new share ran\n", shareContainer, daemon.Name)
	}, SpecTimeout(8*time.Minute))
})

// The MPS v3 scenario: three 20 GiB shares of one card, each with its own
// compute percentage. The stand-in's control.log must show one server and a
// namespace per claim with its percentage, all deleted when the pods go;
// each container has a /dev/shm of its own.
var _ = Describe("Real GPU path: MPS v3", Label(realPathLabel), func() {
	It("gives three shares of one card a namespace each on one server, and a /dev/shm each", func(ctx SpecContext) {
		scenario("real path: MPS v3 namespaces and per-claim /dev/shm for three 20Gi shares of one card")
		ns := newNamespace(ctx)
		percents := map[string]string{"v3-a": "20", "v3-b": "25", "v3-c": "30"}
		for _, pod := range []string{"v3-a", "v3-b", "v3-c"} {
			share := memoryShare("20Gi")
			share.Requests[0].Exactly.Capacity.Requests[device.CapacityCompute] = resource.MustParse(percents[pod])
			createTemplate(ctx, ns, pod, share)
		}
		layout := daemon.Layout{Root: *mpsRoot}
		before, _ := standin.Commands(layout.LogDir())

		// The first share writes its marker into its /dev/shm before the
		// others start; they must not see it.
		createPod(ctx, gpuPod(ns, "v3-a", "v3-a"))
		waitRunning(ctx, ns, "v3-a")
		for _, pod := range []string{"v3-b", "v3-c"} {
			createPod(ctx, gpuPod(ns, pod, pod))
		}
		claims := map[string]string{}
		var card string
		for _, pod := range []string{"v3-a", "v3-b", "v3-c"} {
			report := waitRunning(ctx, ns, pod)
			claim := allocatedClaim(ctx, ns, pod)
			claims[pod] = string(claim.UID)
			res := results(claim)
			Expect(res).To(HaveLen(1))
			if card == "" {
				card = res[0].Device
			}
			Expect(res[0].Device).To(Equal(card), "the three 20Gi shares must be packed onto one card")
			Expect(report["CUDA_MPS_PIPE_DIRECTORY"]).To(Equal(mps.NamespacePipeDir(layout, mpsv3.DefaultServer, claims[pod])))
			Expect(strings.Split(report["SHM_FILES"], ",")).To(ConsistOf("gpu-info-"+pod),
				"pod %s's /dev/shm must hold its own marker only, not another share's", pod)
			// The claim's /dev/shm is a tmpfs of the chart's default
			// kubeletPlugin.mps.shmSize (64Mi), which the plugin mounted
			// and the host sees (Bidirectional propagation of the MPS root).
			fstype, options := hostMount(filepath.Join(*mpsRoot, "claims", claims[pod], "shm"))
			Expect(fstype).To(Equal("tmpfs"), "claim %s's /dev/shm must be a tmpfs of its own on the host", claims[pod])
			Expect(strings.Split(options, ",")).To(ContainElement("size=65536k"), "claim %s's /dev/shm must be bounded to 64Mi", claims[pod])
		}

		entries, err := standin.Log(layout.LogDir())
		Expect(err).NotTo(HaveOccurred())
		entries = entries[len(before):]
		// The plugin drives MPS v3 as NVIDIA documents it: every command as
		// arguments (v3 has no stdin shell), none refused by the strict
		// stand-in (names of [a-z0-9_] only, no set of a namespace in use).
		var commands []string
		for _, e := range entries {
			Expect(e.Transport).To(BeElementOf("argv", "flag"), "a command on stdin to the MPS v3 daemon: %+v", e)
			Expect(e.Rejected).To(BeEmpty(), "the stand-in refused %q", e.Command)
			commands = append(commands, e.Command)
		}
		// One server for the node, not one per claim: while these three
		// shares came, at most one server was created (none if an earlier
		// spec's daemon still ran with it), and every namespace below names it.
		var serverCreates int
		for _, c := range commands {
			if strings.HasPrefix(c, "server create ") {
				serverCreates++
			}
		}
		Expect(serverCreates).To(BeNumerically("<=", 1), "one MPS v3 server for the node:\n%s", strings.Join(commands, "\n"))
		for pod, uid := range claims {
			nsName := mpsv3.NamespaceName(uid)
			Expect(mpsv3.ValidNamespaceName(nsName)).To(Succeed())
			Expect(commands).To(ContainElement("namespace create " + nsName + " --server=" + mpsv3.DefaultServer))
			Expect(commands).To(ContainElement("namespace set "+nsName+" --server="+mpsv3.DefaultServer+
				" --active-thread-percentage="+percents[pod]+" --pinned-memory-limit=20480M"), "control.log:\n%s", strings.Join(commands, "\n"))
		}
		GinkgoWriter.Printf("  control.log of the stand-in for the three shares:\n    %s\n", strings.Join(commands, "\n    "))

		for _, pod := range []string{"v3-a", "v3-b", "v3-c"} {
			deletePodAndWait(ctx, ns, pod)
		}
		Eventually(func(g Gomega) {
			after, err := standin.Commands(layout.LogDir())
			g.Expect(err).NotTo(HaveOccurred())
			for _, uid := range claims {
				g.Expect(after).To(ContainElement("namespace delete " + mpsv3.NamespaceName(uid) + " --server=" + mpsv3.DefaultServer))
				_, statErr := os.Stat(filepath.Join(layout.ClaimsDir(), uid))
				g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "claim %s's /dev/shm directory is left", uid)
			}
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(pollEvery).Should(Succeed())
	}, SpecTimeout(6*time.Minute))
})

// hostMount is the file system type and super options of the mount at
// path in this process's mount namespace (the host's), "" when path is not
// a mount point.
func hostMount(path string) (fstype, options string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || len(fields) < sep+4 || fields[4] != path {
			continue
		}
		fstype, options = fields[sep+1], fields[sep+3]
	}
	return fstype, options
}

// mpsControl sends one MPS v3 command (the chart runs v3 here) to the MPS
// control daemon on pipeDir with the mock driver root's
// nvidia-cuda-mps-control, as an admin would: as arguments after -p 3.
func mpsControl(ctx context.Context, pipeDir string, command ...string) string {
	cmd := exec.CommandContext(ctx, filepath.Join(*mockDriverRoot, "usr/bin/nvidia-cuda-mps-control"), append([]string{"-p", "3"}, command...)...)
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipeDir)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s to the MPS daemon on %s: %s", strings.Join(command, " "), pipeDir, out)
	return string(out)
}

// readMarker reads the key=value lines of the mock driver root's marker.
func readMarker(path string) map[string]string {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred(), "no mock driver root: %s is missing (TANGRAM_MOCK_DRIVER_ROOT=1 make cluster-up creates it)", path)
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}

func versionAttr(d resourceapi.Device, name string) string {
	a, ok := d.Attributes[resourceapi.QualifiedName(device.DriverName+"/"+name)]
	if !ok {
		a = d.Attributes[resourceapi.QualifiedName(name)]
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}

// semverOf writes a driver version as the version attribute carries it:
// NVIDIA's "580.95.05" is semver "580.95.5".
func semverOf(v string) string {
	parts := strings.Split(v, ".")
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		Expect(err).NotTo(HaveOccurred(), "driver version %q", v)
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".")
}

// sysfsPCIeRoot resolves a card's PCI device in the mock sysfs to the
// pciDDDD:BB directory of its root complex, independently of the plugin.
func sysfsPCIeRoot(busID string) string {
	real, err := filepath.EvalSymlinks(filepath.Join(*mockDriverRoot, "sys/bus/pci/devices", busID))
	Expect(err).NotTo(HaveOccurred(), "card %s in the mock sysfs", busID)
	rel, err := filepath.Rel(filepath.Join(*mockDriverRoot, "sys/devices"), real)
	Expect(err).NotTo(HaveOccurred())
	root, _, _ := strings.Cut(rel, "/")
	Expect(root).To(HavePrefix("pci"), "card %s resolves to %s, not under a PCI root", busID, real)
	return root
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// isCardNode tells /dev/nvidia<digits> (a card) from nvidiactl, nvidia-uvm...
func isCardNode(path string) bool {
	rest, ok := strings.CutPrefix(path, "/dev/nvidia")
	if !ok || rest == "" {
		return false
	}
	return strings.Trim(rest, "0123456789") == ""
}

func pluginPodOrNil(ctx context.Context, g Gomega) *corev1.Pod {
	list, err := clientset.CoreV1().Pods(*releaseNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: pluginComponentLabel,
		FieldSelector: "spec.nodeName=" + gpuNode,
	})
	g.Expect(err).NotTo(HaveOccurred(), "listing plugin pods in %s", *releaseNamespace)
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	g.Expect(len(live)).To(BeNumerically("<=", 1), "more than one plugin pod on %s", gpuNode)
	if len(live) == 0 {
		return nil
	}
	return &live[0]
}

// pluginPod is the chart's kubelet plugin pod on the GPU node.
func pluginPod(ctx context.Context) *corev1.Pod {
	p := pluginPodOrNil(ctx, Default)
	Expect(p).NotTo(BeNil(), "no kubelet plugin pod (%s) in %s on %s: is the chart installed?", pluginComponentLabel, *releaseNamespace, gpuNode)
	return p
}

// mpsDaemonPod is the node's MPS control daemon pod the plugin created. It
// lives in the chart's MPS namespace (kubeletPlugin.mps.namespace, default
// <release namespace>-mps), apart from the release's other components.
func mpsDaemonPod(ctx context.Context) *corev1.Pod {
	list, err := clientset.CoreV1().Pods(*releaseNamespace+"-mps").List(ctx, metav1.ListOptions{
		LabelSelector: daemon.LabelComponent + "=" + daemon.DaemonComponent,
		FieldSelector: "spec.nodeName=" + gpuNode,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(list.Items).To(HaveLen(1), "the MPS daemon pod of %s", gpuNode)
	return &list.Items[0]
}

// lastComputeMode is the mode of the last compute-mode switch of the card
// in the mock library's call log.
func lastComputeMode(state mocknvml.State, uuid string) string {
	calls, err := state.Calls()
	Expect(err).NotTo(HaveOccurred())
	mode := ""
	for _, c := range calls {
		if c.Function == setComputeModeCall && c.Args["uuid"] == uuid {
			mode = c.Args["mode"]
		}
	}
	return mode
}

// claimSpecEdits merges the container edits of the claim's CDI spec: the
// spec-wide ones (nvcdi's driver files) and those of its devices.
func claimSpecEdits(uid string) cdispec.ContainerEdits {
	files := cdiSpecsMentioning(uid)
	Expect(files).To(HaveLen(1), "one CDI spec for claim %s", uid)
	data, err := os.ReadFile(filepath.Join(*cdiDir, files[0]))
	Expect(err).NotTo(HaveOccurred())
	var spec cdispec.Spec
	Expect(json.Unmarshal(data, &spec)).To(Succeed(), "CDI spec %s", files[0])
	edits := spec.ContainerEdits
	for _, d := range spec.Devices {
		edits.DeviceNodes = append(edits.DeviceNodes, d.ContainerEdits.DeviceNodes...)
		edits.Mounts = append(edits.Mounts, d.ContainerEdits.Mounts...)
		edits.Hooks = append(edits.Hooks, d.ContainerEdits.Hooks...)
	}
	return edits
}

// containerRoot is /proc/<pid>/root of a process of the container with this
// CRI ID ("containerd://<id>"): its root file system as the host sees it.
func containerRoot(criID string) string {
	_, id, ok := strings.Cut(criID, "://")
	Expect(ok).To(BeTrue(), "container ID %q", criID)
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	Expect(err).NotTo(HaveOccurred())
	for _, p := range procs {
		f, err := os.Open(p)
		if err != nil {
			continue // exited
		}
		s := bufio.NewScanner(f)
		found := false
		for s.Scan() {
			if strings.Contains(s.Text(), id) {
				found = true
				break
			}
		}
		_ = f.Close()
		if found {
			return filepath.Join(filepath.Dir(p), "root")
		}
	}
	Fail("no process of container " + id + " on this host: the realpath specs must run on the GPU node")
	return ""
}

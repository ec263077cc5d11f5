//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// Flags. Every default fits the local cluster of hack/local-cluster; point
// them elsewhere to run the suite against any cluster with Tangram installed.
var (
	kubeconfig       = flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster under test (default $KUBECONFIG)")
	workloadImage    = flag.String("image", "localhost/tangram/gpu-info:dev", "image of the workload that prints what it got (test/images/gpu-info)")
	gpuNodeFlag      = flag.String("gpu-node", "", "node whose kubelet runs the Tangram plugin and the test pods (default: the first such node)")
	simProfile       = flag.String("sim-profile", "pcie-a100-pairs", "fake GPU profile of the API-only node the suite adds for scheduling-only scenarios")
	pluginKillCmd    = flag.String("plugin-kill-cmd", "", "shell command that kills the kubelet plugin on the GPU node without letting it clean up")
	pluginStartCmd   = flag.String("plugin-start-cmd", "", "shell command that returns once the killed kubelet plugin serves again: it starts the plugin, or waits until the plugin's DaemonSet has restarted it")
	cdiDir           = flag.String("cdi-dir", "", "the GPU node's CDI spec directory, when the suite runs on that node (enables the CDI spec checks)")
	helmBinary       = flag.String("helm", "helm", "helm binary that renders the chart's RBAC and admission policies for the privilege scenario")
	tangramScheduler = flag.String("tangram-scheduler", "tangram", "schedulerName of the running tangram-scheduler (Helm value scheduler.schedulerName) the preemption and the demo's packing scenarios compare with the default scheduler")
)

// Shared state, set up once for the whole suite.
var (
	ctxSuite  context.Context
	clientset kubernetes.Interface
	// restConfig is the suite's connection, loaded once from --kubeconfig;
	// copy it (rest.CopyConfig) before changing it.
	restConfig *rest.Config
	gpuNode    string // runs pods: a real kubelet with the Tangram plugin
	simNode    string // only schedules: a Node object without a kubelet
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Tangram e2e")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	ctxSuite = context.Background()
	Expect(*kubeconfig).NotTo(BeEmpty(), "no cluster: pass --kubeconfig or set KUBECONFIG (make e2e does this for the local cluster)")
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	Expect(err).NotTo(HaveOccurred(), "loading kubeconfig %s", *kubeconfig)
	cfg.QPS, cfg.Burst = 50, 100
	restConfig = cfg
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())

	for _, dc := range []string{device.DeviceClassName, device.SharedDeviceClassName} {
		_, err := clientset.ResourceV1().DeviceClasses().Get(ctx, dc, metav1GetOptions)
		Expect(err).NotTo(HaveOccurred(), "DeviceClass %s must exist: install the Helm chart (hack/local-cluster/chart.sh install on the local cluster)", dc)
	}

	gpuNode = findGPUNode(ctx)
	simNode = createSimNode(ctx, "tangram-sim-"+*simProfile, *simProfile, false)
	DeferCleanup(deleteSimNode, simNode)

	GinkgoWriter.Printf("\nNodes under test:\n")
	GinkgoWriter.Printf("  %-28s runs pods: real kubelet + Tangram kubelet plugin (%d GPUs)\n", gpuNode, len(nodeDevices(ctx, gpuNode)))
	GinkgoWriter.Printf("  %-28s only schedules: API-only Node, ResourceSlices from fake profile %q, no kubelet (pods bound there never start)\n\n", simNode, *simProfile)
}, NodeTimeout(2*time.Minute))

// findGPUNode returns the node the suite runs pods on: --gpu-node, or the
// first Ready node with a ResourceSlice of our driver.
func findGPUNode(ctx context.Context) string {
	nodes, err := clientset.CoreV1().Nodes().List(ctx, metav1ListOptions)
	Expect(err).NotTo(HaveOccurred(), "listing nodes")
	var candidates []string
	for _, n := range nodes.Items {
		if n.Labels[roleLabel] == roleScheduleOnly || !nodeReady(&n) {
			continue
		}
		if len(nodeDevices(ctx, n.Name)) > 0 {
			candidates = append(candidates, n.Name)
		}
	}
	if *gpuNodeFlag != "" {
		Expect(candidates).To(ContainElement(*gpuNodeFlag), "--gpu-node %s is not a Ready node publishing %s devices", *gpuNodeFlag, device.DriverName)
		return *gpuNodeFlag
	}
	Expect(candidates).NotTo(BeEmpty(), "no Ready node publishes %s devices: is the kubelet plugin running? (hack/local-cluster/chart.sh install)", device.DriverName)
	return candidates[0]
}

// scenario prints a scenario's name so the output reads as a report.
func scenario(name string) {
	GinkgoWriter.Printf("\n===== scenario: %s =====\n", name)
}

// runShell runs one of the operator-provided plugin control commands.
func runShell(ctx context.Context, what, command string) {
	Expect(command).NotTo(BeEmpty(), "no command to %s: pass --plugin-kill-cmd and --plugin-start-cmd (hack/local-cluster/e2e.sh sets them for the local cluster)", what)
	GinkgoWriter.Printf("  $ %s\n", command)
	out, err := shellCommand(ctx, command).CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "" {
			GinkgoWriter.Printf("    %s\n", l)
		}
	}
	Expect(err).NotTo(HaveOccurred(), fmt.Sprintf("%s: %q failed", what, command))
}

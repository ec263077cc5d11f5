//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

const (
	// roleLabel marks the API-only nodes the suite adds; their taint keeps
	// every pod away except those that ask for them on purpose.
	roleLabel         = "e2e.tangram.dev/role"
	roleScheduleOnly  = "schedule-only"
	scheduleOnlyTaint = "e2e.tangram.dev/schedule-only"
)

var (
	metav1GetOptions  = metav1.GetOptions{}
	metav1ListOptions = metav1.ListOptions{}
)

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeDevices returns our driver's devices on a node, by device name.
func nodeDevices(ctx context.Context, node string) map[string]resourceapi.Device {
	list, err := clientset.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("spec.nodeName", node),
			fields.OneTermEqualSelector("spec.driver", device.DriverName),
		).String(),
	})
	Expect(err).NotTo(HaveOccurred(), "listing ResourceSlices of node %s", node)
	devices := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			devices[d.Name] = d
		}
	}
	return devices
}

// stringAttr reads one of our driver's string attributes of a device.
func stringAttr(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(device.DriverName+"/"+name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// createSimNode adds a Node object named name without a kubelet and
// publishes the ResourceSlices a plugin with the given fake profile (and
// sharing on or off) would publish for it, computed by the same code the
// plugin uses (pkg/gpu, pkg/resourceslices). The scheduler allocates from it like
// from any node; pods bound there never run.
func createSimNode(ctx context.Context, name, profile string, sharing bool) string {
	// A node left behind by an interrupted run would carry stale slices.
	deleteSimNode(ctx, name)

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{roleLabel: roleScheduleOnly, corev1.LabelHostname: name},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: scheduleOnlyTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	node, err := clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating API-only node %s", name)
	// Without allocatable pods the scheduler's resource fit rejects the node.
	// A patch, because controllers update the new node concurrently.
	capacity := `{"cpu":"64","memory":"512Gi","pods":"110"}`
	_, err = clientset.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType,
		[]byte(`{"status":{"capacity":`+capacity+`,"allocatable":`+capacity+`}}`), metav1.PatchOptions{}, "status")
	Expect(err).NotTo(HaveOccurred(), "setting the capacity of API-only node %s", name)

	p, err := fakegpu.BuiltinProfile(profile)
	Expect(err).NotTo(HaveOccurred(), "fake profile %s", profile)
	gpus, err := fakegpu.NewFakeSource(name, p).GPUs(ctx)
	Expect(err).NotTo(HaveOccurred(), "fake GPUs of profile %s", profile)
	// Fake GPUs enforce nothing: the plugin publishes them advisory.
	devices, err := resourceslices.Devices(gpus, resourceslices.Options{NodeName: name, Sharing: sharing, ShareEnforcement: string(enforcement.Advisory)})
	Expect(err).NotTo(HaveOccurred(), "ResourceSlice devices of profile %s", profile)
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: name + "-" + "gpu.tangram.dev-",
			// Garbage-collected with the node, like the kubelet plugin's slices.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID, Controller: ptr.To(true)}},
		},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   device.DriverName,
			NodeName: ptr.To(name),
			Pool:     resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
	_, err = clientset.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "publishing the ResourceSlice of API-only node %s", name)
	return name
}

func deleteSimNode(ctx context.Context, name string) {
	err := clientset.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	Expect(err).NotTo(HaveOccurred(), "deleting API-only node %s", name)
	// Remove its slices now instead of waiting for the garbage collector, so
	// a new node of the same name never sees them.
	Expect(clientset.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String(),
	})).To(Succeed())
	Eventually(func() bool {
		_, err := clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(time.Minute).Should(BeTrue(), "API-only node %s is still there", name)
}

// onSimNode pins a pod to the API-only node and tolerates its taints (also
// the not-ready and unreachable ones the node lifecycle controller adds).
func onSimNode(pod *corev1.Pod) {
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: simNode}
	pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
}

// onAnyOf lets the scheduler choose among the named nodes only, API-only
// ones included (their taints are tolerated).
func onAnyOf(pod *corev1.Pod, nodes ...string) {
	pod.Spec.NodeSelector = nil
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes,
			}}}},
		},
	}}
	pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
}

// forceDeletePodsOn removes the namespace's pods bound to an API-only node at
// once: no kubelet will ever confirm their termination.
func forceDeletePodsOn(ctx context.Context, ns, node string) {
	pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	Expect(err).NotTo(HaveOccurred(), "listing pods of %s on node %s", ns, node)
	for _, p := range pods.Items {
		err := clientset.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if !apierrors.IsNotFound(err) {
			Expect(err).NotTo(HaveOccurred(), "force-deleting pod %s/%s on API-only node %s", ns, p.Name, node)
		}
	}
}

func shellCommand(ctx context.Context, command string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

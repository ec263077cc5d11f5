//go:build e2e

package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Claim-scoped IPC (docs/prepare.md, "The claim's /dev/shm"): the plugin
// gives every claim a /dev/shm of its own, which the CDI spec mounts into
// each container of each pod of the claim, so pods of one claim share
// POSIX shared memory (what CUDA IPC between processes needs) without
// hostIPC, and pods of other claims never see it.
var _ = Describe("Claim-scoped IPC", func() {
	It("gives two pods of one ResourceClaim the same /dev/shm, and a pod of another claim its own", func(ctx SpecContext) {
		scenario("claim /dev/shm: pods ipc-a and ipc-b share claim one (a whole card); ipc-c holds claim two")
		ns := newNamespace(ctx)
		onClaim := func(pod, claim string) *corev1.Pod {
			p := gpuPod(ns, pod, "unused")
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: claimName, ResourceClaimName: ptr.To(claim)}}
			return p
		}
		for _, name := range []string{"one", "two"} {
			_, err := clientset.ResourceV1().ResourceClaims(ns).Create(ctx, &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       resourceapi.ResourceClaimSpec{Devices: wholeGPUs(1)},
			}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred(), "creating ResourceClaim %s", name)
		}
		// gpu-info writes gpu-info-<pod> into /dev/shm, then lists it. The
		// first pod of each claim runs before the second pod starts.
		createPod(ctx, onClaim("ipc-a", "one"))
		createPod(ctx, onClaim("ipc-c", "two"))
		a := waitRunning(ctx, ns, "ipc-a")
		c := waitRunning(ctx, ns, "ipc-c")
		createPod(ctx, onClaim("ipc-b", "one"))
		b := waitRunning(ctx, ns, "ipc-b")

		shm := func(report map[string]string) []string { return strings.Split(report["SHM_FILES"], ",") }
		Expect(shm(a)).To(ConsistOf("gpu-info-ipc-a"), "ipc-a's /dev/shm before any other pod of its claim ran")
		Expect(shm(b)).To(ConsistOf("gpu-info-ipc-a", "gpu-info-ipc-b"),
			"ipc-b shares claim one with ipc-a: it must read what ipc-a wrote into /dev/shm")
		Expect(shm(c)).To(ConsistOf("gpu-info-ipc-c"), "ipc-c holds another claim: it must not see claim one's /dev/shm")
		GinkgoWriter.Printf("  /dev/shm of ipc-a %v, ipc-b %v, ipc-c %v\n", shm(a), shm(b), shm(c))
	}, SpecTimeout(5*time.Minute))
})

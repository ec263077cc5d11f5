//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The chart's pod policies on the local cluster (fake GPUs, default class not
// strict): GPUs only through claims, and root pods on the default class.
var _ = Describe("Pod policies", func() {
	It("refuses a pod without claims that sets NVIDIA_VISIBLE_DEVICES=all, saying why and what to do", func(ctx SpecContext) {
		scenario("GPUs only through claims: a claim-less pod asking NVIDIA's runtime for every GPU is refused when created; NVIDIA_VISIBLE_DEVICES=void passes")
		ns := newNamespace(ctx)
		pod := func(name, visible string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "cuda", Image: *workloadImage, ImagePullPolicy: corev1.PullIfNotPresent,
					Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: visible}}}},
			}}
		}
		_, err := clientset.CoreV1().Pods(ns).Create(ctx, pod("every-gpu", "all"), metav1.CreateOptions{})
		GinkgoWriter.Printf("  refused: %v\n", err)
		Expect(err).To(HaveOccurred(), "a claim-less pod with NVIDIA_VISIBLE_DEVICES=all was admitted (is admissionPolicy.gpuOnlyThroughClaims on?)")
		Expect(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)).To(BeTrue(), "refusal is not a policy denial: %v", err)
		Expect(err.Error()).To(And(
			ContainSubstring("gpu-only-through-claims"),
			ContainSubstring(`pod `+ns+`/every-gpu container "cuda" sets NVIDIA_VISIBLE_DEVICES`),
			ContainSubstring("NVIDIA's container runtime would give it GPUs outside any claim"),
			ContainSubstring("ask for a claim of gpu.tangram.dev")))
		_, err = clientset.CoreV1().Pods(ns).Create(ctx, pod("no-gpu", "void"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		Expect(err).NotTo(HaveOccurred(), "NVIDIA_VISIBLE_DEVICES=void selects no GPU and must pass")
	}, SpecTimeout(3*time.Minute))

	It("runs a root pod with a share of the default class", func(ctx SpecContext) {
		scenario("non-root only where isolation relies on it: a root pod (no security context, as most CUDA images) on a 10Gi share of shared-gpu.tangram.dev runs")
		ns := newNamespace(ctx)
		createTemplate(ctx, ns, "share-10gi", memoryShare("10Gi"))
		createPod(ctx, rootPod(ns, "root-share", "share-10gi"))
		report := waitRunning(ctx, ns, "root-share")
		Expect(report).To(HaveKey("NVIDIA_VISIBLE_DEVICES"), "the share's container must see its card")
		printPodOutput(ctx, ns, "root-share")
	}, SpecTimeout(5*time.Minute))
})

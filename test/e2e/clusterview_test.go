//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/clusterview/cli"
)

// expectStatusJSONAgreesWithClaims runs `kubectl tangram status -o json`
// (the real command, in process, with the suite's kubeconfig) and checks
// that what it reports per card is exactly what the claims' status says:
// every allocation result of ours appears on its card with its consumed
// memory and compute, and nothing else does.
//
// The command and the claim list are two reads of a live cluster, and
// namespaces of earlier scenarios may still be terminating between them,
// so the two must agree within a short window; a lasting disagreement fails.
func expectStatusJSONAgreesWithClaims(ctx context.Context) {
	var claims, results int
	Eventually(ctx, func(g Gomega) {
		var out, errOut bytes.Buffer
		cmd := cli.NewCommand(&out)
		cmd.SetArgs([]string{"status", "-o", "json", "--kubeconfig", *kubeconfig})
		cmd.SetErr(&errOut)
		g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), "kubectl tangram status -o json: %s", errOut.String())

		var view clusterview.View
		g.Expect(json.Unmarshal(out.Bytes(), &view)).To(Succeed(), "decoding kubectl tangram status -o json")

		list, err := clientset.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred(), "listing ResourceClaims")
		all := make([]*resourceapi.ResourceClaim, 0, len(list.Items))
		results = 0
		for i := range list.Items {
			all = append(all, &list.Items[i])
			if a := list.Items[i].Status.Allocation; a != nil {
				results += len(a.Devices.Results)
			}
		}
		claims = len(all)
		g.Expect(results).To(BeNumerically(">", 0), "the check needs allocated claims to compare")
		g.Expect(clusterview.Disagreements(&view, all)).To(BeEmpty(),
			"kubectl tangram status -o json disagrees with the claims' status")
	}).WithTimeout(30 * time.Second).WithPolling(2 * time.Second).Should(Succeed())
	GinkgoWriter.Printf("  kubectl tangram status -o json agrees with the status of %d claims (%d allocation results)\n", claims, results)
}

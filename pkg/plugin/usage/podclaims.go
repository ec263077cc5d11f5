package usage

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// ClaimsOfPods returns the claims each pod uses, by pod UID, each as
// "namespace/name": those its spec names (resourceClaimName) and those
// made for it from a template (status.resourceClaimStatuses). A pod that
// uses none is left out.
func ClaimsOfPods(pods []*corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for _, pod := range pods {
		var names []string
		for _, c := range pod.Spec.ResourceClaims {
			if c.ResourceClaimName != nil {
				names = append(names, pod.Namespace+"/"+*c.ResourceClaimName)
			}
		}
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				names = append(names, pod.Namespace+"/"+*s.ResourceClaimName)
			}
		}
		if len(names) > 0 {
			slices.Sort(names)
			out[string(pod.UID)] = slices.Compact(names)
		}
	}
	return out
}

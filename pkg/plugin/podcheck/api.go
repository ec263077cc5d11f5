// Package podcheck is what the prepare-time pod check
// (pkg/plugin/podsecurity's Check, run by the Driver) reads of the
// cluster: the pods that reserve a claim and whether the check applies to
// their namespace, through the API server. It is apart from podsecurity,
// which tangram-cdi-hook links and which must not pull in client-go.
package podcheck

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// ReservingPods returns the pods a claim is reserved for
// (claim.status.reservedFor): pods themselves, and the pods of this node in
// a PodGroup the claim is reserved for (DRAWorkloadResourceClaims). A pod
// that no longer exists, or is another incarnation than the one reserved,
// is left out: it will not run.
type ReservingPods func(ctx context.Context, claim *resourceapi.ResourceClaim) ([]*corev1.Pod, error)

// APIReservingPods reads the reserving pods through the API server: a get
// per reserved pod (RBAC: get pods), and for a PodGroup a list of the
// claim's namespace's pods on node (list pods).
func APIReservingPods(client kubernetes.Interface, node string) ReservingPods {
	return func(ctx context.Context, claim *resourceapi.ResourceClaim) ([]*corev1.Pod, error) {
		var pods []*corev1.Pod
		for _, ref := range claim.Status.ReservedFor {
			switch {
			case ref.APIGroup == "" && ref.Resource == "pods":
				pod, err := client.CoreV1().Pods(claim.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					continue
				}
				if err != nil {
					return nil, fmt.Errorf("reading pod %s/%s, which the claim is reserved for: %w", claim.Namespace, ref.Name, err)
				}
				if pod.UID == ref.UID {
					pods = append(pods, pod)
				}
			case ref.APIGroup == "scheduling.k8s.io" && ref.Resource == "podgroups":
				list, err := client.CoreV1().Pods(claim.Namespace).List(ctx, metav1.ListOptions{
					FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
				if err != nil {
					return nil, fmt.Errorf("listing the pods of node %s in namespace %s, for PodGroup %s, which the claim is reserved for: %w",
						node, claim.Namespace, ref.Name, err)
				}
				for i := range list.Items {
					if sg := list.Items[i].Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName == ref.Name {
						pods = append(pods, &list.Items[i])
					}
				}
			default:
				return nil, fmt.Errorf("the claim is reserved for %s %s (group %q), whose pods the plugin cannot read; a claim of a class that requires non-root pods must be reserved for pods or PodGroups",
					ref.Resource, ref.Name, ref.APIGroup)
			}
		}
		return pods, nil
	}
}

// NamespaceMatcher reports whether the strict classes' check applies to
// pods of a namespace (the chart's admissionPolicy.sharedGPURunAsNonRoot.namespaceSelector,
// which the admission policies use too).
type NamespaceMatcher func(ctx context.Context, namespace string) (bool, error)

// APINamespaceMatcher matches a namespace's labels, read through the API
// server (RBAC: get namespaces), against selector.
func APINamespaceMatcher(client kubernetes.Interface, selector labels.Selector) NamespaceMatcher {
	return func(ctx context.Context, namespace string) (bool, error) {
		ns, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading namespace %s for its labels: %w", namespace, err)
		}
		return selector.Matches(labels.Set(ns.Labels)), nil
	}
}

// ParseNamespaceSelector reads a metav1.LabelSelector in JSON
// (--nonroot-namespace-selector, as the chart renders its value); "" and
// "{}" select every namespace (nil).
func ParseNamespaceSelector(text string) (labels.Selector, error) {
	if text == "" {
		return nil, nil
	}
	var sel metav1.LabelSelector
	if err := json.Unmarshal([]byte(text), &sel); err != nil {
		return nil, fmt.Errorf("namespace selector %q: not a label selector in JSON: %w", text, err)
	}
	selector, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		return nil, fmt.Errorf("namespace selector %q: %w", text, err)
	}
	if selector.Empty() {
		return nil, nil
	}
	return selector, nil
}

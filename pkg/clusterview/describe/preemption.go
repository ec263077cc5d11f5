package describe

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// PreemptionReport says whether the scheduler is making room for a pending
// pod by evicting lower-priority pods: after a preemption it nominates a
// node (status.nominatedNodeName) and waits for the victims to stop and
// their claims to be freed.
type PreemptionReport struct {
	NominatedNode string `json:"nominatedNode"`
	// Victims are the lower-priority pods on the nominated node that are
	// terminating, with the claims they still hold.
	Victims []PreemptionVictim `json:"victims"`
	// Summary says in one sentence where the preemption stands.
	Summary string `json:"summary"`
}

// PreemptionVictim is one terminating lower-priority pod.
type PreemptionVictim struct {
	Pod string `json:"pod"`
	// Claims are its allocated claims, "namespace/name (device, …)".
	Claims []string `json:"claims"`
}

// preemptionOf reports on the preemption for pod, nil when the pod is
// bound or not nominated to any node.
func preemptionOf(pods []*corev1.Pod, claims claimsByPod, pod *corev1.Pod) *PreemptionReport {
	node := pod.Status.NominatedNodeName
	if pod.Spec.NodeName != "" || node == "" {
		return nil
	}
	r := &PreemptionReport{NominatedNode: node, Victims: []PreemptionVictim{}}
	priority := ptr.Deref(pod.Spec.Priority, 0)
	for _, p := range pods {
		if p.Spec.NodeName != node || p.DeletionTimestamp == nil || ptr.Deref(p.Spec.Priority, 0) >= priority {
			continue
		}
		v := PreemptionVictim{Pod: p.Namespace + "/" + p.Name, Claims: claims[p.UID]}
		if v.Claims == nil {
			v.Claims = []string{}
		}
		r.Victims = append(r.Victims, v)
	}
	slices.SortFunc(r.Victims, func(a, b PreemptionVictim) int { return strings.Compare(a.Pod, b.Pod) })
	if len(r.Victims) > 0 {
		r.Summary = fmt.Sprintf("under way on node %s: waiting for %d evicted lower-priority pod(s) to stop and free their devices", node, len(r.Victims))
	} else {
		r.Summary = fmt.Sprintf("node %s is nominated and no lower-priority pod is terminating there any more: the scheduler binds the pod once its devices are free, or preempts again if another pod took them", node)
	}
	return r
}

// claimsByPod is each pod's allocated claims (by pod UID), rendered as
// "namespace/name (device, …)".
type claimsByPod map[types.UID][]string

func allocatedClaimsByPod(snap *cluster.Snapshot) claimsByPod {
	out := claimsByPod{}
	for _, c := range snap.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		text := fmt.Sprintf("%s/%s (%s)", c.Namespace, c.Name, strings.Join(dra.Devices(c.Status.Allocation), ", "))
		for _, ref := range c.Status.ReservedFor {
			if ref.APIGroup == "" && ref.Resource == "pods" {
				out[ref.UID] = append(out[ref.UID], text)
			}
		}
	}
	return out
}

package usage

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Reasons of the Warning events a Reporter records.
const (
	// ReasonShareExceeded: a share's processes use more memory than the
	// share was given (on its pods).
	ReasonShareExceeded = "GPUShareExceeded"
	// ReasonUnaccounted: a GPU process no prepared claim accounts for (on
	// its pod, or on the Node for a process outside any pod).
	ReasonUnaccounted = "GPUProcessWithoutClaim"
	// ReasonEvicted: a pod was evicted for one of those (ActionEvict); the
	// message says which.
	ReasonEvicted = "GPUUsageEvicted"
	// ReasonEvictionBlocked: its eviction waits, a PodDisruptionBudget
	// allowing no disruption now; it is tried again every round.
	ReasonEvictionBlocked = "GPUUsageEvictionBlocked"
)

// Action is what is done to the pods found breaking a rule: those of a
// share over its memory (--usage-over-share, chart
// kubeletPlugin.usage.overShare), a pod running a GPU process no claim
// accounts for (--usage-unaccounted, kubeletPlugin.usage.unaccounted).
type Action string

const (
	// ActionReport records an event and sets the metric.
	ActionReport Action = "report"
	// ActionEvict also evicts the pods through the Eviction API, which
	// honours their PodDisruptionBudgets.
	ActionEvict Action = "evict"
)

// ParseAction checks the value of flag; empty is report.
func ParseAction(flag, s string) (Action, error) {
	switch a := Action(s); a {
	case "":
		return ActionReport, nil
	case ActionReport, ActionEvict:
		return a, nil
	}
	return "", fmt.Errorf("--%s=%q: want %s (an event and a metric) or %s (also evict the pods, honouring their PodDisruptionBudgets)", flag, s, ActionReport, ActionEvict)
}

// Evictor evicts a pod.
type Evictor interface {
	Evict(ctx context.Context, pod *corev1.Pod) error
}

// APIEvictor evicts through the Eviction API: the API server refuses
// (429) an eviction a PodDisruptionBudget does not allow now.
type APIEvictor struct{ Client kubernetes.Interface }

// Evict implements Evictor; the UID precondition leaves a pod made again
// under the same name alone.
func (e APIEvictor) Evict(ctx context.Context, pod *corev1.Pod) error {
	uid := pod.UID
	return e.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
}

// Reporter tells what the rounds find: a share newly over its memory, a
// process newly found that no claim accounts for. What stays so from one
// round to the next is told once; what ends and comes back, again. With
// ActionEvict it evicts the pods every round until they go. It never acts
// on the node's own daemons (Report.Node) or on admin access (never Over,
// never a stray on the cards it holds), and never signals a process: a
// process outside any pod is told, nothing more.
type Reporter struct {
	Recorder record.EventRecorder
	Node     string
	// Pod returns the node's pod of a UID (NodePods.Pod).
	Pod func(uid string) (*corev1.Pod, bool)
	// OverShare is done to the pods of a share over its memory,
	// Unaccounted to a pod running a process no claim accounts for.
	OverShare, Unaccounted Action
	// Evictor evicts with ActionEvict.
	Evictor Evictor

	// over are the (share, pod) pairs told over, strays the processes
	// told; blocked the pods whose eviction a budget holds (told once),
	// evicted those evicted, until the informer sees them going.
	over    map[overKey]bool
	strays  map[strayKey]bool
	blocked map[types.UID]bool
	evicted map[types.UID]bool
}

// overKey is a share told over on one of its pods ("" for the Node).
type overKey struct{ claim, device, pod string }

type strayKey struct {
	card string
	pid  int
}

// Publish takes one round.
func (r *Reporter) Publish(ctx context.Context, rep Report) {
	targeted := map[types.UID]bool{}
	over := map[overKey]bool{}
	for _, u := range rep.Uses {
		if !u.Over {
			continue
		}
		why := fmt.Sprintf("claim %s/%s uses %s of GPU memory on %s (%s), above the %s it was given", u.Namespace, u.Name,
			formatBytes(u.UsedBytes), u.Device.Device, u.Device.GPUUUID, formatBytes(u.AllowedBytes))
		pods := r.pods(u.Pods)
		if len(pods) == 0 {
			k := overKey{u.ClaimUID, u.Device.Device, ""}
			over[k] = true
			if !r.over[k] {
				r.Recorder.Event(r.nodeRef(), corev1.EventTypeWarning, ReasonShareExceeded, why)
			}
		}
		for _, pod := range pods {
			// Each pod once: one that starts using the share later is told too.
			k := overKey{u.ClaimUID, u.Device.Device, string(pod.UID)}
			over[k] = true
			if !r.over[k] {
				r.Recorder.Event(pod, corev1.EventTypeWarning, ReasonShareExceeded, why)
			}
		}
		if r.OverShare == ActionEvict {
			r.evict(ctx, pods, why, targeted)
		}
	}
	r.over = over
	strays := map[strayKey]bool{}
	for _, s := range rep.Strays {
		k := strayKey{s.Card, s.PID}
		strays[k] = true
		if !r.strays[k] {
			r.tellStray(s)
		}
		if r.Unaccounted == ActionEvict && s.Pod != "" {
			why := fmt.Sprintf("process %d of this pod uses GPU %s, but the pod holds no prepared claim on that GPU", s.PID, s.Card)
			r.evict(ctx, r.pods([]string{s.Pod}), why, targeted)
		}
	}
	r.strays = strays
	// Kept while the pod lives, also through a round that left its card
	// out (NVML could not list it): gone or going, it is forgotten.
	for _, m := range []map[types.UID]bool{r.blocked, r.evicted} {
		for uid := range m {
			if pod, ok := r.Pod(string(uid)); !ok || pod.DeletionTimestamp != nil {
				delete(m, uid)
			}
		}
	}
}

func (r *Reporter) nodeRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: r.Node, UID: types.UID(r.Node)}
}

// pods returns the pods of uids the informer knows.
func (r *Reporter) pods(uids []string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, uid := range uids {
		if pod, ok := r.Pod(uid); ok {
			out = append(out, pod)
		}
	}
	return out
}

func (r *Reporter) tellStray(s Stray) {
	used := "memory NVML does not report"
	if s.UsedBytes >= 0 {
		used = formatBytes(s.UsedBytes)
	}
	if s.Pod != "" {
		if pod, ok := r.Pod(s.Pod); ok {
			r.Recorder.Eventf(pod, corev1.EventTypeWarning, ReasonUnaccounted,
				"process %d of this pod uses GPU %s (%s) on node %s, but the pod holds no prepared claim on that GPU", s.PID, s.Card, used, r.Node)
			return
		}
	}
	where := "outside any pod"
	if s.Pod != "" {
		where = "of pod " + s.Pod + " (not found)"
	}
	r.Recorder.Eventf(r.nodeRef(), corev1.EventTypeWarning, ReasonUnaccounted,
		"process %d %s uses GPU %s (%s), and no prepared claim accounts for it", s.PID, where, s.Card, used)
}

// evict asks for the eviction of each of pods not already going, for why,
// and marks them targeted. A PodDisruptionBudget that allows none now is
// told once and tried again next round; a pod evicted is not asked again
// while the informer has yet to see it going.
func (r *Reporter) evict(ctx context.Context, pods []*corev1.Pod, why string, targeted map[types.UID]bool) {
	logger := klog.FromContext(ctx)
	if r.blocked == nil {
		r.blocked, r.evicted = map[types.UID]bool{}, map[types.UID]bool{}
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || targeted[pod.UID] {
			continue
		}
		targeted[pod.UID] = true
		if r.evicted[pod.UID] {
			continue
		}
		err := r.Evictor.Evict(ctx, pod)
		switch {
		case err == nil:
			delete(r.blocked, pod.UID)
			r.evicted[pod.UID] = true
			logger.Info("Evicted a pod for its GPU use", "pod", klog.KObj(pod), "why", why)
			r.Recorder.Eventf(pod, corev1.EventTypeWarning, ReasonEvicted, "evicted: %s", why)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or another pod under its name.
		case apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause):
			if !r.blocked[pod.UID] {
				r.blocked[pod.UID] = true
				r.Recorder.Eventf(pod, corev1.EventTypeWarning, ReasonEvictionBlocked, "%s, but evicting this pod would break its PodDisruptionBudget (%v); tried again every round", why, err)
			}
		default:
			// Throttled (429 without a budget's cause), a pod under two
			// budgets (500), the API server away.
			logger.Error(err, "Evicting a pod for its GPU use failed; tried again next round", "pod", klog.KObj(pod), "why", why)
		}
	}
}

// formatBytes writes n as GiB or MiB with one decimal.
func formatBytes(n int64) string {
	const mib, gib = 1 << 20, 1 << 30
	if n >= gib {
		return fmt.Sprintf("%.1fGiB", float64(n)/gib)
	}
	return fmt.Sprintf("%.1fMiB", float64(n)/mib)
}

package usage

import (
	"context"
	"fmt"
	"slices"

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
	// ReasonShareEvicted: the pod of a share over its memory was evicted
	// (OverShareEvict).
	ReasonShareEvicted = "GPUShareEvicted"
	// ReasonEvictionBlocked: its eviction waits, a PodDisruptionBudget
	// allowing no disruption now; it is tried again every round.
	ReasonEvictionBlocked = "GPUShareEvictionBlocked"
	// ReasonUnaccounted: a GPU process no prepared claim accounts for (on
	// its pod, or on the Node for a process outside any pod).
	ReasonUnaccounted = "GPUProcessWithoutClaim"
)

// OverShareAction is what is done to the pods of a share that uses more
// memory than it was given (--usage-over-share, chart
// kubeletPlugin.usage.overShare).
type OverShareAction string

const (
	// OverShareReport records an event and sets the metric.
	OverShareReport OverShareAction = "report"
	// OverShareEvict also evicts the share's pods through the Eviction
	// API, which honours their PodDisruptionBudgets.
	OverShareEvict OverShareAction = "evict"
)

// ParseOverShareAction checks --usage-over-share; empty is report.
func ParseOverShareAction(s string) (OverShareAction, error) {
	switch a := OverShareAction(s); a {
	case "":
		return OverShareReport, nil
	case OverShareReport, OverShareEvict:
		return a, nil
	}
	return "", fmt.Errorf("--usage-over-share=%q: want %s (an event and a metric) or %s (also evict the share's pods, honouring their PodDisruptionBudgets)", s, OverShareReport, OverShareEvict)
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
// round to the next is told once; what ends and comes back, again. It
// never acts on the node's own daemons (Report.Node) or on admin access
// (never Over), and never on a stray process: those are told.
type Reporter struct {
	Recorder record.EventRecorder
	Node     string
	// Pod returns the node's pod of a UID (NodePods.Pod).
	Pod       func(uid string) (*corev1.Pod, bool)
	OverShare OverShareAction
	// Evictor evicts with OverShareEvict.
	Evictor Evictor

	over    map[useKey]bool
	strays  map[strayKey]bool
	blocked map[types.UID]bool
}

type useKey struct{ claim, device string }

type strayKey struct {
	card string
	pid  int
}

// Publish takes one round.
func (r *Reporter) Publish(ctx context.Context, rep Report) {
	over := map[useKey]bool{}
	for _, u := range rep.Uses {
		if !u.Over {
			continue
		}
		k := useKey{u.ClaimUID, u.Device.Device}
		over[k] = true
		if !r.over[k] {
			r.tellOver(u)
		}
		if r.OverShare == OverShareEvict {
			r.evict(ctx, u)
		}
	}
	r.over = over
	for uid := range r.blocked {
		if !slices.ContainsFunc(rep.Uses, func(u Use) bool { return u.Over && slices.Contains(u.Pods, string(uid)) }) {
			delete(r.blocked, uid)
		}
	}
	strays := map[strayKey]bool{}
	for _, s := range rep.Strays {
		k := strayKey{s.Card, s.PID}
		strays[k] = true
		if !r.strays[k] {
			r.tellStray(s)
		}
	}
	r.strays = strays
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

func (r *Reporter) tellOver(u Use) {
	msg := fmt.Sprintf("claim %s/%s uses %s of GPU memory on %s (%s), above the %s it was given", u.Namespace, u.Name,
		formatBytes(u.UsedBytes), u.Device.Device, u.Device.GPUUUID, formatBytes(u.Device.MemoryBytes))
	pods := r.pods(u.Pods)
	if len(pods) == 0 {
		r.Recorder.Event(r.nodeRef(), corev1.EventTypeWarning, ReasonShareExceeded, msg)
		return
	}
	for _, pod := range pods {
		r.Recorder.Event(pod, corev1.EventTypeWarning, ReasonShareExceeded, msg)
	}
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

// evict asks for the eviction of each pod of u not already going. A
// PodDisruptionBudget that allows none now is told once and tried again
// next round.
func (r *Reporter) evict(ctx context.Context, u Use) {
	logger := klog.FromContext(ctx)
	if r.blocked == nil {
		r.blocked = map[types.UID]bool{}
	}
	for _, pod := range r.pods(u.Pods) {
		if pod.DeletionTimestamp != nil {
			continue
		}
		err := r.Evictor.Evict(ctx, pod)
		switch {
		case err == nil:
			delete(r.blocked, pod.UID)
			logger.Info("Evicted the pod of a share over its GPU memory", "pod", klog.KObj(pod), "claim", klog.KRef(u.Namespace, u.Name), "usedBytes", u.UsedBytes, "allowedBytes", u.Device.MemoryBytes)
			r.Recorder.Eventf(pod, corev1.EventTypeWarning, ReasonShareEvicted, "evicted: claim %s/%s uses %s of GPU memory on %s, above the %s it was given",
				u.Namespace, u.Name, formatBytes(u.UsedBytes), u.Device.Device, formatBytes(u.Device.MemoryBytes))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone, or another pod under its name.
		case apierrors.IsTooManyRequests(err):
			if !r.blocked[pod.UID] {
				r.blocked[pod.UID] = true
				r.Recorder.Eventf(pod, corev1.EventTypeWarning, ReasonEvictionBlocked, "claim %s/%s is over its GPU memory, but evicting this pod would break its PodDisruptionBudget (%v); tried again every round",
					u.Namespace, u.Name, err)
			}
		default:
			logger.Error(err, "Evicting the pod of a share over its GPU memory failed; tried again next round", "pod", klog.KObj(pod), "claim", klog.KRef(u.Namespace, u.Name))
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

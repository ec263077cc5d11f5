package gang

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/klog/v2"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
)

// Reconciler brings one GpuGang's owned objects and status up to date.
type Reconciler struct {
	Kube      kubernetes.Interface
	Gangs     GangClient
	Pods      corelisters.PodLister
	Claims    resourcelisters.ResourceClaimLister
	Templates resourcelisters.ResourceClaimTemplateLister
	Workloads schedulinglisters.WorkloadLister
	PodGroups schedulinglisters.PodGroupLister
	Cluster   informer.Source
	// PendingResync is how soon a pending gang is diagnosed again: slices
	// and other claims change without touching the gang.
	PendingResync time.Duration
}

// conflictError is an object with the gang's name that the gang does not
// own; the controller never takes over or deletes it.
type conflictError struct{ kind, name string }

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %s exists and is not owned by this GpuGang; delete or rename it, or rename the GpuGang", e.kind, e.name)
}

// missingClassError is a spec.priorityClassName that names no
// PriorityClass; the controller creates nothing until it exists.
type missingClassError struct{ name string }

func (e *missingClassError) Error() string {
	return fmt.Sprintf("PriorityClass %q (spec.priorityClassName) does not exist, so the Workload, PodGroup and ResourceClaimTemplate are not created yet: "+
		"create the PriorityClass (kubectl create priorityclass %s --value=<priority>), or delete the GpuGang and create it again with an existing class or none (kubectl get priorityclasses)",
		e.name, e.name)
}

// Reconcile handles the gang namespace/name. It returns when to look again
// (0 for only on events) and errors worth a retry with backoff.
func (r *Reconciler) Reconcile(ctx context.Context, namespace, name string) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	g, err := r.Gangs.Get(namespace, name)
	if apierrors.IsNotFound(err) {
		// Owned objects go with it through the garbage collector.
		logger.V(4).Info("GpuGang is gone")
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading GpuGang %s/%s: %w", namespace, name, err)
	}
	if g.DeletionTimestamp != nil {
		return 0, nil
	}
	status := g.Status.DeepCopy()
	status.ObservedGeneration = g.Generation
	status.PodGroupName = PodGroupName(g)
	status.ResourceClaimTemplateName = TemplateName(g)

	if err := ValidateSpec(&g.Spec); err != nil {
		r.fail(status, "InvalidSpec", err.Error())
		return 0, r.writeStatus(ctx, g, status)
	}
	topology, err := r.ensureObjects(ctx, g)
	var conflict *conflictError
	var missing *missingClassError
	switch {
	case errors.As(err, &missing):
		// Nothing was created; the class may appear later, so look again.
		status.Phase = tangramv1.GangPending
		status.Diagnosis = missing.Error()
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionObjectsReady,
			Status: metav1.ConditionFalse, Reason: "PriorityClassNotFound", Message: missing.Error(), ObservedGeneration: g.Generation})
		return r.PendingResync, r.writeStatus(ctx, g, status)
	case errors.As(err, &conflict):
		r.fail(status, "NameConflict", conflict.Error())
		return 0, r.writeStatus(ctx, g, status)
	case err != nil:
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionObjectsReady,
			Status: metav1.ConditionFalse, Reason: "CreateFailed", Message: err.Error(), ObservedGeneration: g.Generation})
		if werr := r.writeStatus(ctx, g, status); werr != nil {
			logger.Error(werr, "Recording the failure in status")
		}
		return 0, err
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionObjectsReady,
		Status: metav1.ConditionTrue, Reason: "Created", ObservedGeneration: g.Generation,
		Message: "Workload, PodGroup and ResourceClaimTemplate exist; " + podsHint(g)})
	setTopologyCondition(status, g, topology)

	members, err := r.summarize(ctx, g, status)
	if err != nil {
		return 0, err
	}
	pg, err := r.PodGroups.PodGroups(g.Namespace).Get(PodGroupName(g))
	if err != nil {
		// Just created: the cache has not seen it yet; the event brings the gang back.
		pg = nil
	}
	setPriorityCondition(status, g, pg, members.pods)
	if err := r.writeStatus(ctx, g, status); err != nil {
		return 0, err
	}
	if status.Phase == tangramv1.GangPending {
		return r.PendingResync, nil
	}
	return 0, nil
}

// summarize fills in the members, the phase and, while pending, the
// diagnosis.
func (r *Reconciler) summarize(ctx context.Context, g *tangramv1.GpuGang, status *tangramv1.GpuGangStatus) (Members, error) {
	members, err := r.observeMembers(g)
	if err != nil {
		return Members{}, err
	}
	status.Members = members.Statuses
	status.Placed, status.Running = members.Placed, members.Running
	status.Phase = Phase(g, members)
	status.Diagnosis = ""
	switch status.Phase {
	case tangramv1.GangFailed:
		status.Diagnosis = "member " + plural(len(members.Failed), "pod", "pods") + " failed: " + strings.Join(members.Failed, ", ")
	case tangramv1.GangPending:
		snap, err := r.Cluster.Snapshot()
		if err != nil {
			return Members{}, fmt.Errorf("reading the cluster for the diagnosis of GpuGang %s/%s: %w", g.Namespace, g.Name, err)
		}
		if status.Diagnosis, err = Diagnose(ctx, snap, g, members); err != nil {
			return Members{}, err
		}
	}
	return members, nil
}

func (r *Reconciler) fail(status *tangramv1.GpuGangStatus, reason, message string) {
	status.Phase = tangramv1.GangFailed
	status.Diagnosis = message
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionObjectsReady,
		Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: status.ObservedGeneration})
}

// writeStatus updates the status subresource when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, g *tangramv1.GpuGang, status *tangramv1.GpuGangStatus) error {
	if equality.Semantic.DeepEqual(&g.Status, status) {
		return nil
	}
	updated := g.DeepCopy()
	updated.Status = *status
	klog.FromContext(ctx).V(2).Info("Updating GpuGang status", "phase", status.Phase, "placed", status.Placed, "running", status.Running)
	return r.Gangs.UpdateStatus(ctx, updated)
}

func (r *Reconciler) observeMembers(g *tangramv1.GpuGang) (Members, error) {
	pods, err := r.Pods.Pods(g.Namespace).List(labels.Everything())
	if err != nil {
		return Members{}, fmt.Errorf("listing pods in %s from the cache: %w", g.Namespace, err)
	}
	var members []*corev1.Pod
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, pod := range pods {
		if !IsMember(g, pod) {
			continue
		}
		members = append(members, pod)
		if entry := memberClaimRef(g, pod); entry != "" {
			if name := claimNameOf(pod, entry); name != "" {
				c, err := r.Claims.ResourceClaims(g.Namespace).Get(name)
				switch {
				case apierrors.IsNotFound(err):
				case err != nil:
					return Members{}, fmt.Errorf("reading claim %s/%s of pod %s: %w", g.Namespace, name, pod.Name, err)
				default:
					claims[name] = c
				}
			}
		}
	}
	return ObserveMembers(g, members, claims), nil
}

// topologyState says what became of the gang's topology key.
type topologyState int

const (
	topologyNone topologyState = iota
	topologyEnforced
	topologyUnsupported
)

func setTopologyCondition(status *tangramv1.GpuGangStatus, g *tangramv1.GpuGang, t topologyState) {
	switch t {
	case topologyNone:
		meta.RemoveStatusCondition(&status.Conditions, tangramv1.ConditionTopologyEnforced)
	case topologyEnforced:
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionTopologyEnforced,
			Status: metav1.ConditionTrue, Reason: "PodGroupConstraint", ObservedGeneration: g.Generation,
			Message: fmt.Sprintf("the PodGroup keeps all members on nodes with the same %s", g.Spec.TopologyKey)})
	case topologyUnsupported:
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: tangramv1.ConditionTopologyEnforced,
			Status: metav1.ConditionFalse, Reason: "NotSupportedByCluster", ObservedGeneration: g.Generation,
			Message: fmt.Sprintf("the API server drops or refuses PodGroup topology constraints (feature gate TopologyAwareWorkloadScheduling is off), "+
				"so members may land in different %s domains; give member pods a nodeSelector on %s to pin them to one", g.Spec.TopologyKey, g.Spec.TopologyKey)})
	}
}

// ensureObjects creates the template, the Workload and the PodGroup if they
// are missing. The gang's spec is immutable, so existing objects are kept
// as they are. The PriorityClass is resolved first, so that a missing one
// leaves nothing half created.
func (r *Reconciler) ensureObjects(ctx context.Context, g *tangramv1.GpuGang) (topologyState, error) {
	prio, err := r.resolvePriority(ctx, g)
	if err != nil {
		return topologyNone, err
	}
	if err := r.ensureTemplate(ctx, g); err != nil {
		return topologyNone, err
	}
	if _, err := ensureWithTopology(ctx, g, "Workload", WorkloadName(g),
		func() (*schedulingapi.Workload, error) {
			return r.Workloads.Workloads(g.Namespace).Get(WorkloadName(g))
		},
		func(withTopology bool) (*schedulingapi.Workload, error) {
			return r.Kube.SchedulingV1beta1().Workloads(g.Namespace).Create(ctx, DesiredWorkload(g, withTopology, prio), metav1.CreateOptions{})
		},
		func(w *schedulingapi.Workload) bool {
			return len(w.Spec.PodGroupTemplates) > 0 && hasTopology(w.Spec.PodGroupTemplates[0].SchedulingConstraints, g.Spec.TopologyKey)
		}); err != nil {
		return topologyNone, err
	}
	return ensureWithTopology(ctx, g, "PodGroup", PodGroupName(g),
		func() (*schedulingapi.PodGroup, error) {
			return r.PodGroups.PodGroups(g.Namespace).Get(PodGroupName(g))
		},
		func(withTopology bool) (*schedulingapi.PodGroup, error) {
			return r.Kube.SchedulingV1beta1().PodGroups(g.Namespace).Create(ctx, DesiredPodGroup(g, withTopology, prio), metav1.CreateOptions{})
		},
		func(pg *schedulingapi.PodGroup) bool {
			return hasTopology(pg.Spec.SchedulingConstraints, g.Spec.TopologyKey)
		})
}

// resolvePriority reads the gang's PriorityClass when the PodGroup or the
// Workload still has to be created (their priority is immutable, so the
// class is not read again once both exist). A gang without a class gets the zero Priority.
func (r *Reconciler) resolvePriority(ctx context.Context, g *tangramv1.GpuGang) (Priority, error) {
	name := g.Spec.PriorityClassName
	if name == "" {
		return Priority{}, nil
	}
	_, pgErr := r.PodGroups.PodGroups(g.Namespace).Get(PodGroupName(g))
	_, wlErr := r.Workloads.Workloads(g.Namespace).Get(WorkloadName(g))
	if pgErr == nil && wlErr == nil {
		return Priority{}, nil
	}
	pc, err := r.Kube.SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Priority{}, &missingClassError{name: name}
	case err != nil:
		return Priority{}, fmt.Errorf("reading PriorityClass %s (spec.priorityClassName of GpuGang %s/%s): %w", name, g.Namespace, g.Name, err)
	}
	return Priority{ClassName: name, Value: pc.Value}, nil
}

func (r *Reconciler) ensureTemplate(ctx context.Context, g *tangramv1.GpuGang) error {
	existing, err := r.Templates.ResourceClaimTemplates(g.Namespace).Get(TemplateName(g))
	switch {
	case err == nil:
		return checkOwned(g, "ResourceClaimTemplate", existing)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", g.Namespace, TemplateName(g), err)
	}
	_, err = r.Kube.ResourceV1().ResourceClaimTemplates(g.Namespace).Create(ctx, DesiredTemplate(g), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", g.Namespace, TemplateName(g), err)
	}
	klog.FromContext(ctx).V(2).Info("Created ResourceClaimTemplate", "name", TemplateName(g))
	return nil
}

// ensureWithTopology gets or creates a Workload or PodGroup. A 1.37 API
// server without topology-aware workload scheduling silently drops the
// constraint (checked on a real one); should one refuse it instead, the
// object is created without it. Either way the gang says so.
func ensureWithTopology[T metav1.Object](ctx context.Context, g *tangramv1.GpuGang, kind, name string,
	get func() (T, error), create func(withTopology bool) (T, error), enforced func(T) bool) (topologyState, error) {
	obj, err := get()
	switch {
	case err == nil:
		if err := checkOwned(g, kind, obj); err != nil {
			return topologyNone, err
		}
	case !apierrors.IsNotFound(err):
		return topologyNone, fmt.Errorf("reading %s %s/%s: %w", kind, g.Namespace, name, err)
	default:
		obj, err = create(true)
		if err != nil && g.Spec.TopologyKey != "" && apierrors.IsInvalid(err) && strings.Contains(err.Error(), "schedulingConstraints") {
			klog.FromContext(ctx).Info("The API server rejects topology constraints; creating without", "kind", kind, "err", err)
			obj, err = create(false)
		}
		if err != nil {
			// AlreadyExists too: the cache is behind, and the retry reads it.
			return topologyNone, fmt.Errorf("creating %s %s/%s: %w", kind, g.Namespace, name, err)
		}
		klog.FromContext(ctx).V(2).Info("Created object", "kind", kind, "name", name)
	}
	switch {
	case g.Spec.TopologyKey == "":
		return topologyNone, nil
	case enforced(obj):
		return topologyEnforced, nil
	}
	return topologyUnsupported, nil
}

func hasTopology(c *schedulingapi.PodGroupSchedulingConstraints, key string) bool {
	if c == nil {
		return false
	}
	for _, t := range c.Topology {
		if t.Key == key {
			return true
		}
	}
	return false
}

func checkOwned(g *tangramv1.GpuGang, kind string, obj metav1.Object) error {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.UID == g.UID {
		return nil
	}
	return &conflictError{kind: kind, name: g.Namespace + "/" + obj.GetName()}
}

package preemption

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// maxDisruptedPods is the Eviction API's limit on a budget's
// status.disruptedPods (MaxDisruptedPodSize in kube-apiserver's eviction
// REST): beyond it every eviction the budget covers is refused.
const maxDisruptedPods = 2000

// EvictionRefused says which PodDisruptionBudget would refuse which of a
// set of victims, and why. CheckEvictions and EvictAll return it.
type EvictionRefused struct {
	// Budget is the budget's "namespace/name".
	Budget string
	// Victims are the victims ("namespace/name") it covers.
	Victims []string
	Reason  string
}

func (e *EvictionRefused) Error() string {
	return fmt.Sprintf("PodDisruptionBudget %s refuses evicting %s: %s", e.Budget, strings.Join(e.Victims, ", "), e.Reason)
}

// CheckEvictions says whether the Eviction API would let every one of the
// victims go, evicted together, with the budgets pdbs as they are now (the
// caller reads them fresh): nil, or an *EvictionRefused for the first
// budget that would refuse one of them. It follows the API server's rules
// (pkg/registry/core/pod/storage/eviction.go), not the scheduler's: a pod
// that is pending, terminal or terminating needs no budget; one covered by
// two budgets is refused; a budget whose status is older than its spec
// refuses; an unready pod goes without taking a disruption when the budget
// says AlwaysAllow, or when it is healthy anyway (currentHealthy >=
// desiredHealthy > 0); every other victim a budget covers takes one of its
// disruptionsAllowed, and the victims together may take no more than it
// has.
func CheckEvictions(pdbs []*policyv1.PodDisruptionBudget, victims []*v1.Pod) error {
	type tally struct {
		pdb     *policyv1.PodDisruptionBudget
		victims []string
	}
	var taken []*tally
	byBudget := map[*policyv1.PodDisruptionBudget]*tally{}
	for _, v := range victims {
		if canIgnoreBudget(v) {
			continue
		}
		var covering []*policyv1.PodDisruptionBudget
		for _, pdb := range pdbs {
			if pdb.Namespace != v.Namespace {
				continue
			}
			// As the API server: an invalid selector matches nothing, an
			// empty one every pod, a nil one none.
			selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || !selector.Matches(labels.Set(v.Labels)) {
				continue
			}
			covering = append(covering, pdb)
		}
		if len(covering) == 0 {
			continue
		}
		name := v.Namespace + "/" + v.Name
		pdb := covering[0]
		if len(covering) > 1 {
			return &EvictionRefused{Budget: key(pdb), Victims: []string{name},
				Reason: fmt.Sprintf("the pod is covered by PodDisruptionBudget %s as well, and the Eviction API refuses a pod with more than one budget", key(covering[1]))}
		}
		if !isReady(v) {
			if pdb.Spec.UnhealthyPodEvictionPolicy != nil && *pdb.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow {
				continue
			}
			if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
				continue
			}
		}
		if pdb.Status.ObservedGeneration < pdb.Generation {
			return &EvictionRefused{Budget: key(pdb), Victims: []string{name},
				Reason: fmt.Sprintf("the disruption controller has not processed the budget yet (observedGeneration %d < generation %d)", pdb.Status.ObservedGeneration, pdb.Generation)}
		}
		if len(pdb.Status.DisruptedPods) > maxDisruptedPods {
			return &EvictionRefused{Budget: key(pdb), Victims: []string{name},
				Reason: fmt.Sprintf("more than %d evictions are not confirmed by the disruption controller yet", maxDisruptedPods)}
		}
		t := byBudget[pdb]
		if t == nil {
			t = &tally{pdb: pdb}
			byBudget[pdb] = t
			taken = append(taken, t)
		}
		t.victims = append(t.victims, name)
	}
	for _, t := range taken {
		if n := int32(len(t.victims)); n > t.pdb.Status.DisruptionsAllowed {
			slices.Sort(t.victims)
			return &EvictionRefused{Budget: key(t.pdb), Victims: t.victims,
				Reason: fmt.Sprintf("it allows %d disruption(s) now and these victims would take %d", max(t.pdb.Status.DisruptionsAllowed, 0), n)}
		}
	}
	return nil
}

// EvictAll evicts the victims with evict, one after the other, once
// CheckEvictions has passed for all of them together against pdbs (read
// fresh by the caller): when a budget would refuse one victim, none is
// evicted and the *EvictionRefused is returned. A victim evict fails for
// stops the rest; the ones evicted before stay evicted (the Eviction API
// has no transaction: a budget that changes between the check and the
// evictions is the one way to get there).
func EvictAll(ctx context.Context, victims []*v1.Pod, pdbs []*policyv1.PodDisruptionBudget, evict func(context.Context, *v1.Pod) error) error {
	if err := CheckEvictions(pdbs, victims); err != nil {
		return err
	}
	for _, v := range victims {
		if err := evict(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// canIgnoreBudget: the Eviction API deletes a pending, terminal or
// terminating pod without looking at budgets.
func canIgnoreBudget(p *v1.Pod) bool {
	switch p.Status.Phase {
	case v1.PodPending, v1.PodSucceeded, v1.PodFailed:
		return true
	}
	return p.DeletionTimestamp != nil
}

func isReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func key(pdb *policyv1.PodDisruptionBudget) string { return pdb.Namespace + "/" + pdb.Name }

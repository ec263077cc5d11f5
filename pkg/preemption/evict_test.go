package preemption_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/preemption"
)

// TestEvictAll: every victim's PodDisruptionBudget is checked before any is
// evicted, for the victims together; a budget that refuses one victim means
// none is evicted. Before, victims were evicted one after the other and the
// API server's refusal of a later one left the earlier ones evicted for
// nothing.
func TestEvictAll(t *testing.T) {
	db := map[string]string{"app": "db"}
	running := func(name string, labels map[string]string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: ktypes.UID("uid-" + name), Labels: labels},
			Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
	}
	unready := func(name string, labels map[string]string) *v1.Pod {
		p := running(name, labels)
		p.Status.Conditions = nil
		return p
	}
	terminating := func(name string, labels map[string]string) *v1.Pod {
		p := running(name, labels)
		p.DeletionTimestamp = ptr.To(metav1.Now())
		return p
	}
	pending := func(name string, labels map[string]string) *v1.Pod {
		p := running(name, labels)
		p.Status.Phase = v1.PodPending
		return p
	}
	stale := pdb("db", 5, db)
	stale.Generation, stale.Status.ObservedGeneration = 3, 2
	alwaysAllow := pdb("db", 0, db)
	alwaysAllow.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
	everything := pdb("all", 0, nil)
	everything.Spec.Selector = &metav1.LabelSelector{}
	for _, tc := range []struct {
		name    string
		victims []*v1.Pod
		pdbs    []*policyv1.PodDisruptionBudget
		// failOn makes evict fail for that victim (the API server
		// refusing after the check passed).
		failOn      string
		wantEvicted []string
		// wantRefused is in the *EvictionRefused of a refusal.
		wantRefused string
	}{
		{name: "no budget: all go", victims: []*v1.Pod{running("a", nil), running("b", db)},
			wantEvicted: []string{"a", "b"}},
		{name: "a budget allowing two covers both: all go", victims: []*v1.Pod{running("a", db), running("b", db), running("c", nil)},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 2, db)}, wantEvicted: []string{"a", "b", "c"}},
		{name: "a budget allowing one, two of the victims: none goes", victims: []*v1.Pod{running("a", nil), running("b", db), running("c", db)},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 1, db)}, wantRefused: "default/db refuses evicting default/b, default/c: it allows 1 disruption(s) now and these victims would take 2"},
		{name: "a budget refusing the last victim: the first ones are not evicted either", victims: []*v1.Pod{running("a", nil), running("b", nil), running("c", db)},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 0, db)}, wantRefused: "default/db refuses evicting default/c: it allows 0 disruption(s)"},
		{name: "two budgets cover one victim: the Eviction API refuses it, none goes", victims: []*v1.Pod{running("a", nil), running("b", db)},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 5, db), pdb("db-too", 5, db)}, wantRefused: "more than one budget"},
		{name: "a budget not processed by the disruption controller yet: none goes", victims: []*v1.Pod{running("a", nil), running("b", db)},
			pdbs: []*policyv1.PodDisruptionBudget{stale}, wantRefused: "not processed the budget yet"},
		{name: "an empty selector covers every pod of its namespace, as the API server reads it", victims: []*v1.Pod{running("a", nil)},
			pdbs: []*policyv1.PodDisruptionBudget{everything}, wantRefused: "default/all refuses evicting default/a"},
		{name: "a budget of another namespace covers nothing", victims: []*v1.Pod{running("a", db)},
			pdbs:        []*policyv1.PodDisruptionBudget{func() *policyv1.PodDisruptionBudget { p := pdb("db", 0, db); p.Namespace = "other"; return p }()},
			wantEvicted: []string{"a"}},
		{name: "terminating and pending pods need no budget", victims: []*v1.Pod{terminating("a", db), pending("b", db)},
			pdbs: []*policyv1.PodDisruptionBudget{pdb("db", 0, db)}, wantEvicted: []string{"a", "b"}},
		{name: "an unready pod under unhealthyPodEvictionPolicy AlwaysAllow takes no disruption", victims: []*v1.Pod{unready("a", db)},
			pdbs: []*policyv1.PodDisruptionBudget{alwaysAllow}, wantEvicted: []string{"a"}},
		{name: "a ready pod under AlwaysAllow still does", victims: []*v1.Pod{running("a", db)},
			pdbs: []*policyv1.PodDisruptionBudget{alwaysAllow}, wantRefused: "default/db refuses evicting default/a"},
		{name: "the API server refuses after the check: the rest is not tried", victims: []*v1.Pod{running("a", nil), running("b", nil), running("c", nil)},
			failOn: "b", wantEvicted: []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var evicted []string
			errAPI := errors.New("too many requests")
			err := preemption.EvictAll(context.Background(), tc.victims, tc.pdbs, func(_ context.Context, p *v1.Pod) error {
				if p.Name == tc.failOn {
					return errAPI
				}
				evicted = append(evicted, p.Name)
				return nil
			})
			if !slices.Equal(evicted, tc.wantEvicted) {
				t.Errorf("evicted %v, want %v", evicted, tc.wantEvicted)
			}
			var refused *preemption.EvictionRefused
			switch {
			case tc.wantRefused != "":
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.wantRefused) {
					t.Errorf("EvictAll: %v, want a refusal saying %q", err, tc.wantRefused)
				}
				if checkErr := preemption.CheckEvictions(tc.pdbs, tc.victims); checkErr == nil || checkErr.Error() != err.Error() {
					t.Errorf("CheckEvictions: %v, want the same refusal", checkErr)
				}
			case tc.failOn != "":
				if !errors.Is(err, errAPI) {
					t.Errorf("EvictAll: %v, want the eviction's error", err)
				}
			case err != nil:
				t.Errorf("EvictAll: %v, want no error", err)
			}
		})
	}
}

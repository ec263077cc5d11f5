package podcheck

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/podsecurity"
)

// Result is the check's answer for one claim: Refused, or the strict
// class its containers are held to (prepared.Claim.NonRootClass, "" when
// none).
type Result struct {
	Refused     error
	StrictClass string
}

// Checker is the prepare-time check of the pods reserving claims of the
// strict classes. Without Classes or ReservingPods it checks nothing.
type Checker struct {
	// Classes are the strict device classes (--nonroot-device-classes).
	Classes []string
	// ReservingPods reads the pods reserving a claim.
	ReservingPods ReservingPods
	// Namespaces limits the check to some namespaces; nil: all.
	Namespaces NamespaceMatcher
}

// Check refuses the claims of a strict class (Classes)
// that a pod not locked down reserves (pkg/plugin/podsecurity), before any
// lock is taken: it may read the API server. Claims of other classes cost
// nothing. A pod the plugin cannot read refuses the claim too (the kubelet
// retries): the check fails closed. A claim that passes keeps its strict
// class, which its CDI spec gives the create hook of every container that
// joins it later (the kubelet prepares a claim once).
func (c Checker) Check(ctx context.Context, claims []*resourceapi.ResourceClaim) map[types.UID]Result {
	if len(c.Classes) == 0 || c.ReservingPods == nil {
		return nil
	}
	checks := map[types.UID]Result{}
	for _, claim := range claims {
		strict := podsecurity.StrictClasses(claim, device.DriverName, c.Classes)
		if len(strict) == 0 {
			continue
		}
		if c.Namespaces != nil {
			applies, err := c.Namespaces(ctx, claim.Namespace)
			if err != nil {
				checks[claim.UID] = Result{Refused: fmt.Errorf("checking that the pods using the claim run as non-root: %w", err)}
				continue
			}
			if !applies {
				continue
			}
		}
		pods, err := c.ReservingPods(ctx, claim)
		if err == nil {
			err = podsecurity.Check(claim, pods, device.DriverName, c.Classes)
		} else {
			err = fmt.Errorf("checking that the pods using the claim run as non-root: %w", err)
		}
		if err != nil {
			checks[claim.UID] = Result{Refused: err}
			continue
		}
		checks[claim.UID] = Result{StrictClass: strict[0]}
		klog.FromContext(ctx).V(4).Info("Pods of a strict share run locked down", "claim", klog.KObj(claim), "pods", len(pods), "class", strict[0])
	}
	return checks
}

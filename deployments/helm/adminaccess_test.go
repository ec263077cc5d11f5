//go:build helm

package helm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	tangramslices "github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// adminFix is the one line the claim-requests policy tells an admin-access
// request to add.
const adminFix = `capacity: {requests: {memory: "0"}}`

// TestAdminAccessPolicyMatchesAllocator: admin access on Tangram's classes
// must ask for memory 0. The form the Kubernetes docs and the reference
// example driver show (adminAccess: true, no capacity) asks for the request
// policy's default, all memory, and the 1.37 allocator checks an admin
// request's capacity beside the holders of a shareable card, so the claim
// would stay Pending with "cannot allocate all claims" (pkg/dra,
// TestAdminAccessNamingNoCapacity). The policy refuses it when the claim or
// template is created, with the line to add. Each decision is held to the
// real allocator on a sharing node whose gpu-0 is held whole and whose
// gpu-1 is fully shared: what the policy admits reaches both busy cards;
// what it refuses is unschedulable on at least one; and a refused request
// naming no capacity, once the line is added, is admitted and reaches both.
func TestAdminAccessPolicyMatchesAllocator(t *testing.T) {
	objs := render(t)
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", "tangram-claim-requests").(*admissionv1.ValidatingAdmissionPolicy))
	const whole, shared = device.DeviceClassName, device.SharedDeviceClassName
	capacity := func(kv ...string) *resourceapi.CapacityRequirements {
		if len(kv) == 0 {
			return nil
		}
		c := &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		for i := 0; i < len(kv); i += 2 {
			c.Requests[resourceapi.QualifiedName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return c
	}
	admin := func(name, class string, c *resourceapi.CapacityRequirements) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, Capacity: c,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true)}}
	}
	const wantAdmin = "has adminAccess: true but does not ask for memory 0"
	cases := []struct {
		name     string
		requests []resourceapi.DeviceRequest
		// want: the denial contains it and names refused (the
		// requests' names); "" means admitted.
		want    string
		refused string
	}{
		{name: "the documented form: no capacity, whole-card class", requests: []resourceapi.DeviceRequest{admin("monitor", whole, nil)},
			want: wantAdmin, refused: "request monitor "},
		{name: "no capacity, shared class", requests: []resourceapi.DeviceRequest{admin("monitor", shared, nil)},
			want: wantAdmin, refused: "request monitor "},
		{name: "memory 0, whole-card class", requests: []resourceapi.DeviceRequest{admin("monitor", whole, capacity("memory", "0"))}},
		{name: "memory 0Gi, whole-card class", requests: []resourceapi.DeviceRequest{admin("monitor", whole, capacity("memory", "0Gi"))}},
		{name: "memory 0, shared class", requests: []resourceapi.DeviceRequest{admin("monitor", shared, capacity("memory", "0"))}},
		{name: "memory 0 and compute 0, shared class", requests: []resourceapi.DeviceRequest{admin("monitor", shared, capacity("memory", "0", "compute", "0"))}},
		{name: "compute 0 only, shared class", requests: []resourceapi.DeviceRequest{admin("monitor", shared, capacity("compute", "0"))},
			want: wantAdmin, refused: "request monitor "},
		{name: "memory 20Gi, shared class", requests: []resourceapi.DeviceRequest{admin("monitor", shared, capacity("memory", "20Gi"))},
			want: wantAdmin, refused: "request monitor "},
		{name: "memory 0 and compute 50, shared class", requests: []resourceapi.DeviceRequest{admin("monitor", shared, capacity("memory", "0", "compute", "50"))},
			want: wantAdmin, refused: "request monitor "},
		{name: "two requests, one naming no capacity", requests: []resourceapi.DeviceRequest{
			admin("ok", whole, capacity("memory", "0")), admin("bare", whole, nil)},
			want: wantAdmin, refused: "request bare "},
		{name: "another driver's class", requests: []resourceapi.DeviceRequest{admin("monitor", "gpu.nvidia.com", nil)}},
	}

	// A sharing node: gpu-0 held whole, gpu-1 fully shared (2 × 40Gi, 2 × 50).
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource("node-a", p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := tangramslices.DriverResources(gpus, tangramslices.Options{NodeName: "node-a", Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	busyNode := func(t *testing.T) *dra.Node {
		t.Helper()
		n := &dra.Node{Name: "node-a", Slices: tangramslices.ResourceSlices("node-a", res), Classes: device.DeviceClasses()}
		holders := []*resourceapi.ResourceClaim{
			dra.Claim("holder", nil, dra.WholeGPUs("gpu", 1, `device.attributes["gpu.tangram.dev"].index == 0`)),
			dra.Claim("s1", nil, dra.SharedGPU("gpu", resource.MustParse("40Gi"), resource.MustParse("50"), `device.attributes["gpu.tangram.dev"].index == 1`)),
			dra.Claim("s2", nil, dra.SharedGPU("gpu", resource.MustParse("40Gi"), resource.MustParse("50"), `device.attributes["gpu.tangram.dev"].index == 1`)),
		}
		for _, c := range holders {
			if _, err := n.Allocate(context.Background(), c); err != nil {
				t.Fatalf("placing %s: %v", c.Name, err)
			}
		}
		return n
	}
	// onCard is the claim with every request pinned to one card.
	onCard := func(requests []resourceapi.DeviceRequest, card int) *resourceapi.ResourceClaim {
		claim := claimWith("monitor", requests)
		for i := range claim.Spec.Devices.Requests {
			e := claim.Spec.Devices.Requests[i].Exactly
			e.Selectors = append(e.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["gpu.tangram.dev"].index == %d`, card)}})
		}
		return claim
	}
	tangramOnly := func(requests []resourceapi.DeviceRequest) bool {
		for _, r := range requests {
			if r.Exactly.DeviceClassName != whole && r.Exactly.DeviceClassName != shared {
				return false
			}
		}
		return true
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := admitted(t, policy, claimWith("monitor", tc.requests))
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("denied: %s", got)
			case tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, tc.refused) || !strings.Contains(got, adminFix)):
				t.Fatalf("denial %q, want one containing %q, %q and the line %s", got, tc.want, tc.refused, adminFix)
			}
			if !tangramOnly(tc.requests) {
				return
			}
			var unschedulable []int
			for _, card := range []int{0, 1} {
				_, err := busyNode(t).Allocate(context.Background(), onCard(tc.requests, card))
				switch {
				case errors.Is(err, dra.ErrUnschedulable):
					unschedulable = append(unschedulable, card)
				case err != nil:
					t.Fatalf("gpu-%d: %v", card, err)
				}
			}
			if tc.want == "" && len(unschedulable) > 0 {
				t.Errorf("admitted, but unschedulable beside the holders of gpu %v", unschedulable)
			}
			if tc.want != "" && len(unschedulable) == 0 {
				t.Errorf("refused, but the allocator places it beside every holder: the refusal is no longer needed (docs/resourceslices.md)")
			}
			// The line the message gives, added to each request naming no
			// capacity, makes the claim admitted and schedulable.
			fixed := make([]resourceapi.DeviceRequest, len(tc.requests))
			touched := false
			for i, r := range tc.requests {
				r = *r.DeepCopy()
				if r.Exactly.Capacity == nil {
					r.Exactly.Capacity = capacity("memory", "0")
					touched = true
				}
				fixed[i] = r
			}
			if tc.want == "" || !touched {
				return
			}
			if got := admitted(t, policy, claimWith("monitor", fixed)); got != "" {
				t.Fatalf("with %s added: denied: %s", adminFix, got)
			}
			for _, card := range []int{0, 1} {
				if _, err := busyNode(t).Allocate(context.Background(), onCard(fixed, card)); err != nil {
					t.Errorf("with %s added, beside the holders of gpu-%d: %v", adminFix, card, err)
				}
			}
		})
	}
}

// claimWith is a claim in namespace monitoring with the given requests.
func claimWith(name string, requests []resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "monitoring", UID: types.UID(name)}}
	for _, r := range requests {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, *r.DeepCopy())
	}
	return c
}

// admitted evaluates the claim-requests policy on creating the claim and
// a template of it: "" when both are admitted, else the denial (which must
// be the same for both).
func admitted(t *testing.T, policy validating.Validator, claim *resourceapi.ResourceClaim) string {
	t.Helper()
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: claim.Namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim.Spec}}
	admin := &user.DefaultInfo{Name: "monitoring-admin"}
	var got []string
	for _, req := range []request{
		{user: admin, op: admission.Create, namespace: claim.Namespace, object: claim,
			gvk: resourceapi.SchemeGroupVersion.WithKind("ResourceClaim"), gvr: resourceapi.SchemeGroupVersion.WithResource("resourceclaims")},
		{user: admin, op: admission.Create, namespace: claim.Namespace, object: template,
			gvk: resourceapi.SchemeGroupVersion.WithKind("ResourceClaimTemplate"), gvr: resourceapi.SchemeGroupVersion.WithResource("resourceclaimtemplates")},
	} {
		got = append(got, denied(t, policy, req))
	}
	if got[0] != got[1] {
		t.Errorf("claim and template decided differently: %q vs %q", got[0], got[1])
	}
	return got[0]
}

// TestAdminAccessPolicyWithoutSharing: with sharing.enabled=false no card
// allows multiple allocations, so the allocator places the documented form
// beside any holder and the policy does not refuse it.
func TestAdminAccessPolicyWithoutSharing(t *testing.T) {
	objs := render(t, "sharing.enabled=false")
	policy := compilePolicy(t, objs.get(t, "ValidatingAdmissionPolicy", "tangram-claim-requests").(*admissionv1.ValidatingAdmissionPolicy))
	documented := resourceapi.DeviceRequest{Name: "monitor", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: device.DeviceClassName,
		AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true),
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.tangram.dev"].index == 0`}}}}}
	claim := claimWith("monitor", []resourceapi.DeviceRequest{documented})
	if got := admitted(t, policy, claim); got != "" {
		t.Fatalf("with sharing disabled the documented admin form was refused: %s", got)
	}
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := fakegpu.NewFakeSource("node-a", p).GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := tangramslices.DriverResources(gpus, tangramslices.Options{NodeName: "node-a", Sharing: false})
	if err != nil {
		t.Fatal(err)
	}
	n := &dra.Node{Name: "node-a", Slices: tangramslices.ResourceSlices("node-a", res), Classes: device.DeviceClasses()}
	if _, err := n.Allocate(context.Background(), dra.Claim("holder", nil, dra.WholeGPUs("gpu", 1, `device.attributes["gpu.tangram.dev"].index == 0`))); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Allocate(context.Background(), claim); err != nil {
		t.Errorf("admitted without sharing, but not placed beside the whole-card holder: %v", err)
	}
}

// TestClaimRequestPolicyOnlyOnCreate: a claim's and a template's spec are
// immutable, so the policy has nothing to check on UPDATE; matching UPDATE
// would refuse the metadata updates of an object created before the policy
// (or before a chart upgrade tightened it): the scheduler adding its
// finalizer, the claim controller removing it, so such a claim could never
// be allocated or deleted. Here: the documented admin form, allocated on a
// whole-card node before the upgrade, losing its finalizer.
func TestClaimRequestPolicyOnlyOnCreate(t *testing.T) {
	objs := render(t)
	vap := objs.get(t, "ValidatingAdmissionPolicy", "tangram-claim-requests").(*admissionv1.ValidatingAdmissionPolicy)
	policy := compilePolicy(t, vap)
	legacy := claimWith("monitor", []resourceapi.DeviceRequest{{Name: "monitor", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: device.DeviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, AdminAccess: ptr.To(true)}}})
	legacy.Finalizers = []string{resourceapi.Finalizer}
	released := legacy.DeepCopy()
	released.Finalizers = nil
	update := request{user: &user.DefaultInfo{Name: "system:serviceaccount:kube-system:resource-claim-controller"}, op: admission.Update,
		namespace: legacy.Namespace, object: released, old: legacy,
		gvk: resourceapi.SchemeGroupVersion.WithKind("ResourceClaim"), gvr: resourceapi.SchemeGroupVersion.WithResource("resourceclaims")}
	for _, rule := range vap.Spec.MatchConstraints.ResourceRules {
		for _, op := range rule.Operations {
			if op != admissionv1.Update && op != admissionv1.OperationAll {
				continue
			}
			if got := denied(t, policy, update); got != "" {
				t.Errorf("the policy matches %s and refuses the claim controller removing the finalizer of a claim created before it: %s", op, got)
			}
		}
	}
}

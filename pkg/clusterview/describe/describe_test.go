package describe

import (
	"bytes"
	"context"
	"flag"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/internal/golden"
	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/device"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// checkGolden compares got with testdata/name (golden.Check).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, name, got, *update)
}

func claimNamed(t *testing.T, snap *cluster.Snapshot, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	if c := findClaim(snap, ns, name); c != nil {
		return c
	}
	t.Fatalf("no claim %s/%s in the fixture", ns, name)
	return nil
}

func podNamed(t *testing.T, snap *cluster.Snapshot, ns, name string) *corev1.Pod {
	t.Helper()
	for _, p := range snap.Pods {
		if p.Namespace == ns && p.Name == name {
			return p
		}
	}
	t.Fatalf("no pod %s/%s in the fixture", ns, name)
	return nil
}

func TestDescribeClaimGolden(t *testing.T) {
	ctx := context.Background()
	c, err := fixture.Demo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ ns, name, golden string }{
		{"serve", "infer-a", "claim-share.golden"},
		{"ml", "train-4x", "claim-nvlink.golden"},
		{"ml", "pair", "claim-whole-only-node.golden"},
		{"serve", "big-share", "claim-pending-too-big.golden"},
		{"ml", "train-8x", "claim-pending-nvlink.golden"},
		{"ml", "trainer-coordinator", "claim-podgroup.golden"},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			r, err := DescribeClaim(ctx, &c.Snap, claimNamed(t, &c.Snap, tc.ns, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := WriteClaim(&out, r, clusterview.Style{}); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.Bytes())
		})
	}
}

// TestDescribeShareEnforcement: a share says how its node enforces it and,
// below hard, why (the plugin's shareEnforcement and shareEnforcementReason).
func TestDescribeShareEnforcement(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ level, reason, golden string }{
		{"compute-only", device.ReasonDmemNotEnabled, "claim-share-compute-only.golden"},
		{"hard", "", "claim-share-hard.golden"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			c, err := fixture.Demo(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.Snap.Slices {
				if s.Spec.NodeName == nil || *s.Spec.NodeName != "dgx-a" {
					continue
				}
				for i := range s.Spec.Devices {
					attrs := s.Spec.Devices[i].Attributes
					attrs[device.AttrShareEnforcement] = resourceapi.DeviceAttribute{StringValue: ptr.To(tc.level)}
					if tc.reason != "" {
						attrs[device.AttrShareEnforcementReason] = resourceapi.DeviceAttribute{StringValue: ptr.To(tc.reason)}
					}
				}
			}
			r, err := DescribeClaim(ctx, &c.Snap, claimNamed(t, &c.Snap, "serve", "infer-a"))
			if err != nil {
				t.Fatal(err)
			}
			if g := r.Devices[0]; g.ShareEnforcement != tc.level || g.ShareEnforcementReason != tc.reason {
				t.Errorf("grant %+v, want enforcement %q (%q)", g, tc.level, tc.reason)
			}
			var out bytes.Buffer
			if err := WriteClaim(&out, r, clusterview.Style{}); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.Bytes())
		})
	}
}

func TestDescribePodGolden(t *testing.T) {
	ctx := context.Background()
	c, err := fixture.Demo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A pod whose template claim has not been created yet, next to one
	// that has.
	waiting := podNamed(t, &c.Snap, "ml", "train-8x-pod").DeepCopy()
	waiting.Name = "templated"
	waiting.Spec.ResourceClaims = append(waiting.Spec.ResourceClaims,
		corev1.PodResourceClaim{Name: "scratch", ResourceClaimTemplateName: ptr.To("scratch-gpu")})
	c.Snap.Pods = append(c.Snap.Pods, waiting)
	// A pod whose claim is allocated but which is not bound yet.
	unbound := podNamed(t, &c.Snap, "lab", "notebook-pod").DeepCopy()
	unbound.Name, unbound.Spec.NodeName, unbound.Status.Phase = "unbound", "", corev1.PodPending

	// A pod with two pending claims that each fit alone, on different
	// nodes: three whole cards (only a100-a has that many free) and a 60Gi
	// share (only the shareable DGX cards).
	three := c.Pending(fixture.Whole("lab", "three", 3, false))
	share := c.Pending(fixture.Share("lab", "big-notebook", "60Gi", 0))
	apart := podNamed(t, &c.Snap, "lab", "three-pod").DeepCopy()
	apart.Name = "apart"
	apart.Spec.ResourceClaims = []corev1.PodResourceClaim{
		{Name: "cards", ResourceClaimName: ptr.To(three.Name)},
		{Name: "share", ResourceClaimName: ptr.To(share.Name)},
	}

	tests := []struct {
		pod    *corev1.Pod
		golden string
		format string
	}{
		{apart, "pod-claims-not-together.golden", clusterview.FormatTable},
		{podNamed(t, &c.Snap, "serve", "infer-b-pod"), "pod-running.golden", clusterview.FormatTable},
		{podNamed(t, &c.Snap, "serve", "big-share-pod"), "pod-pending.golden", clusterview.FormatTable},
		{waiting, "pod-template-missing.golden", clusterview.FormatTable},
		{unbound, "pod-claims-allocated-not-bound.golden", clusterview.FormatTable},
		{podNamed(t, &c.Snap, "serve", "big-share-pod"), "pod-pending.json.golden", clusterview.FormatJSON},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			r, err := DescribePod(ctx, &c.Snap, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if tc.format == clusterview.FormatTable {
				err = WritePod(&out, r, clusterview.Style{})
			} else {
				err = clusterview.WriteData(&out, tc.format, r)
			}
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.Bytes())
		})
	}
}

// A claim allocated on a device that no slice publishes any more is still
// described, with what its status says.
func TestDescribeClaimMissingDevice(t *testing.T) {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "old", UID: "u1"},
		Spec:       fixture.Whole("ns", "old", 1, false).Spec,
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.tangram.dev", Pool: "gone", Device: "gpu-0"}},
		}}},
	}
	snap := &cluster.Snapshot{Claims: []*resourceapi.ResourceClaim{claim}, Classes: device.DeviceClasses()}
	r, err := DescribeClaim(context.Background(), snap, claim)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StateAllocated || len(r.Devices) != 1 || !r.Devices[0].Missing || !r.Devices[0].Whole {
		t.Errorf("got %+v", r)
	}
}

func TestStatusWithReasonsGolden(t *testing.T) {
	ctx := context.Background()
	c, err := fixture.Demo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v := clusterview.Build(&c.Snap, clusterview.Options{})
	// Only the first pending claim is explained.
	if err := ExplainPending(ctx, &c.Snap, v, 1); err != nil {
		t.Fatal(err)
	}
	if v.Pending[0].Why == "" || v.Pending[1].Why != "" {
		t.Fatalf("limit 1 explained %q and %q", v.Pending[0].Why, v.Pending[1].Why)
	}
	if err := ExplainPending(ctx, &c.Snap, v, 10); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := clusterview.WriteStatus(&out, v, clusterview.Style{}); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "status-with-reasons.golden", out.Bytes())
}

// TestDescribePreemption: a pending pod nominated to a node after a
// preemption says whether the victims are still terminating there, and a
// pod that is not nominated says nothing about preemption.
func TestDescribePreemption(t *testing.T) {
	ctx := context.Background()
	c, err := fixture.Demo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	preemptor := podNamed(t, &c.Snap, "serve", "big-share-pod").DeepCopy()
	preemptor.Name, preemptor.Spec.Priority = "urgent", ptr.To[int32](1000)
	preemptor.Status.NominatedNodeName = "dgx-a"
	// eval (whole card) is evicted; a higher-priority terminating pod is
	// not a victim of this preemptor.
	victim := podNamed(t, &c.Snap, "ml", "eval-pod")
	victim.DeletionTimestamp = ptr.To(metav1.Now())
	victim.Spec.Priority = ptr.To[int32](10)
	other := podNamed(t, &c.Snap, "serve", "infer-a-pod")
	other.DeletionTimestamp = ptr.To(metav1.Now())
	other.Spec.Priority = ptr.To[int32](2000)

	for _, tc := range []struct {
		name         string
		pod          *corev1.Pod
		terminating  bool
		golden       string
		wantVictims  int
		wantReported bool
	}{
		{"victim terminating", preemptor, true, "pod-preempting.golden", 1, true},
		{"victim gone", preemptor, false, "pod-preempting-victims-gone.golden", 0, true},
		{"not nominated", podNamed(t, &c.Snap, "serve", "big-share-pod"), true, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victim.DeletionTimestamp = nil
			if tc.terminating {
				victim.DeletionTimestamp = ptr.To(metav1.Now())
			}
			r, err := DescribePod(ctx, &c.Snap, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if (r.Preemption != nil) != tc.wantReported {
				t.Fatalf("preemption reported: %+v, want reported %v", r.Preemption, tc.wantReported)
			}
			if r.Preemption != nil && len(r.Preemption.Victims) != tc.wantVictims {
				t.Errorf("victims %+v, want %d", r.Preemption.Victims, tc.wantVictims)
			}
			if tc.golden == "" {
				return
			}
			var out bytes.Buffer
			if err := WritePod(&out, r, clusterview.Style{}); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.Bytes())
		})
	}
}

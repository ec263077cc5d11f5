// Package describe answers "what did this pod or claim get, or why is it
// still waiting": the model behind `kubectl tangram describe`, built from a
// snapshot, and its text rendering. Pending claims are explained by
// pkg/diagnosis, the same code the controller uses.
package describe

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/diagnosis"
)

// Claim states.
const (
	StateAllocated = "allocated"
	StatePending   = "pending"
)

// ClaimReport is what one claim asked for and got.
type ClaimReport struct {
	Claim cluster.ClaimRef `json:"claim"`
	// AsksFor says in a few words what the claim requests.
	AsksFor string `json:"asksFor"`
	// State is "allocated" or "pending".
	State string `json:"state"`
	// Nodes are the nodes its devices are on (one for node-local GPUs).
	Nodes []string `json:"nodes"`
	// Pods are the pods it is reserved for, "namespace/name".
	Pods []string `json:"pods"`
	// OtherConsumers are other objects it is reserved for (a gang's
	// PodGroup), "resource.group/namespace/name".
	OtherConsumers []string      `json:"otherConsumers"`
	Devices        []DeviceGrant `json:"devices"`
	// Diagnosis explains a pending claim.
	Diagnosis *diagnosis.ClaimDiagnosis `json:"diagnosis,omitempty"`
}

// DeviceGrant is one allocated device, with the limits a share gets.
type DeviceGrant struct {
	Request      string `json:"request"`
	Driver       string `json:"driver"`
	Node         string `json:"node"`
	Pool         string `json:"pool"`
	Device       string `json:"device"`
	UUID         string `json:"uuid"`
	ProductName  string `json:"productName"`
	NVLinkDomain string `json:"nvlinkDomain"`
	Whole        bool   `json:"whole"`
	ShareID      string `json:"shareID,omitempty"`
	// MemoryBytes and ComputePercent are the share's limits (MPS enforces
	// them in the container); for a whole card, the card's capacity.
	MemoryBytes    int64 `json:"memoryBytes"`
	ComputePercent int64 `json:"computePercent"`
	// Missing is true when no current ResourceSlice publishes the device.
	Missing bool `json:"missing,omitempty"`
	// ShareEnforcement is how hard the device's node holds a share to its
	// limits ("hard", "compute-only", "advisory"), and
	// ShareEnforcementReason why not harder (a device.Reason… code), as
	// the plugin publishes them; empty for whole cards and unknown.
	ShareEnforcement       string `json:"shareEnforcement,omitempty"`
	ShareEnforcementReason string `json:"shareEnforcementReason,omitempty"`
}

// PodReport is a pod and each of its claims.
type PodReport struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Phase     string     `json:"phase"`
	Node      string     `json:"node"`
	Claims    []PodClaim `json:"claims"`
	// Together, when set, says why the pod's pending claims cannot be
	// allocated although each could be on its own: the scheduler needs one
	// node for all of them.
	Together string `json:"together,omitempty"`
	// Preemption, for a pod not bound yet but nominated to a node, says
	// whether the scheduler is evicting lower-priority pods for it.
	Preemption *PreemptionReport `json:"preemption,omitempty"`
}

// PodClaim is one entry of the pod's spec.resourceClaims.
type PodClaim struct {
	// Name is the pod's name for the claim (spec.resourceClaims[].name).
	Name string `json:"name"`
	// Report is nil when the claim does not exist (yet); Problem says why.
	Report  *ClaimReport `json:"report,omitempty"`
	Problem string       `json:"problem,omitempty"`
}

// DescribeClaim reports on one claim of the snapshot.
func DescribeClaim(ctx context.Context, snap *cluster.Snapshot, claim *resourceapi.ResourceClaim) (*ClaimReport, error) {
	inv := cluster.NewInventory(snap)
	r := &ClaimReport{
		Claim:   cluster.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: string(claim.UID)},
		AsksFor: diagnosis.DescribeClaimSpec(claim),
		Nodes:   []string{},
		Pods:    []string{},
		Devices: []DeviceGrant{},
	}
	r.Pods, r.OtherConsumers = clusterview.Consumers(claim)
	if claim.Status.Allocation == nil {
		r.State = StatePending
		d, err := diagnosis.Claim(ctx, snap, claim)
		if err != nil {
			return nil, fmt.Errorf("diagnosing claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		r.Diagnosis = d
		return r, nil
	}
	r.State = StateAllocated
	nodes := map[string]bool{}
	for i := range claim.Status.Allocation.Devices.Results {
		res := &claim.Status.Allocation.Devices.Results[i]
		g := grant(inv, claim, res)
		if g.Node != "" && !nodes[g.Node] {
			nodes[g.Node] = true
			r.Nodes = append(r.Nodes, g.Node)
		}
		r.Devices = append(r.Devices, g)
	}
	sort.Strings(r.Nodes)
	return r, nil
}

func grant(inv *cluster.Inventory, claim *resourceapi.ResourceClaim, res *resourceapi.DeviceRequestAllocationResult) DeviceGrant {
	g := DeviceGrant{Request: res.Request, Driver: res.Driver, Pool: res.Pool, Device: res.Device}
	if res.ShareID != nil {
		g.ShareID = string(*res.ShareID)
	}
	ds := inv.Device(res.Driver, res.Pool, res.Device)
	if ds == nil {
		g.Missing = true
		g.Whole = res.ShareID == nil || res.ConsumedCapacity == nil
		if q, ok := res.ConsumedCapacity[device.CapacityMemory]; ok {
			g.MemoryBytes = q.Value()
		}
		if q, ok := res.ConsumedCapacity[device.CapacityCompute]; ok {
			g.ComputePercent = q.Value()
		}
		return g
	}
	g.Node = ds.Node
	g.UUID = ds.StringAttribute(device.AttrUUID)
	g.ProductName = ds.StringAttribute(device.AttrProductName)
	g.NVLinkDomain = ds.StringAttribute(device.AttrNVLinkDomain)
	for _, a := range ds.Allocations {
		if a.Result != res && !(a.Claim.UID == claim.UID && a.Result.Request == res.Request && ptr.Equal(a.Result.ShareID, res.ShareID)) {
			continue
		}
		g.Whole = a.Whole
		if !a.Whole {
			g.ShareEnforcement = ds.StringAttribute(device.AttrShareEnforcement)
			g.ShareEnforcementReason = ds.StringAttribute(device.AttrShareEnforcementReason)
		}
		if q, ok := a.Consumed[device.CapacityMemory]; ok {
			g.MemoryBytes = q.Value()
		}
		if q, ok := a.Consumed[device.CapacityCompute]; ok {
			g.ComputePercent = q.Value()
		}
	}
	return g
}

// DescribePod reports on a pod and each claim it uses. Claims are looked up
// in the snapshot by the name the pod's status (or spec) gives them.
func DescribePod(ctx context.Context, snap *cluster.Snapshot, pod *corev1.Pod) (*PodReport, error) {
	r := &PodReport{
		Namespace: pod.Namespace, Name: pod.Name,
		Phase: string(pod.Status.Phase), Node: pod.Spec.NodeName,
		Claims: []PodClaim{},
	}
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		entry := PodClaim{Name: pc.Name}
		name, _, err := resourceclaim.Name(pod, pc)
		switch {
		case err != nil:
			entry.Problem = fmt.Sprintf("no claim yet: the resource claim controller has not created it from template %q (%v)",
				ptr.Deref(pc.ResourceClaimTemplateName, ""), err)
		case name == nil:
			entry.Problem = "no claim is needed for this entry (the pod's status says so)"
		default:
			claim := findClaim(snap, pod.Namespace, *name)
			if claim == nil {
				entry.Problem = fmt.Sprintf("claim %s/%s does not exist", pod.Namespace, *name)
				break
			}
			rep, err := DescribeClaim(ctx, snap, claim)
			if err != nil {
				return nil, err
			}
			entry.Report = rep
		}
		r.Claims = append(r.Claims, entry)
	}
	r.Preemption = preemptionOf(snap.Pods, allocatedClaimsByPod(snap), pod)
	if err := checkTogether(ctx, snap, r); err != nil {
		return nil, err
	}
	return r, nil
}

// checkTogether fills r.Together when the pod has several pending claims
// that each fit somewhere but not all on one node.
func checkTogether(ctx context.Context, snap *cluster.Snapshot, r *PodReport) error {
	var pending []*resourceapi.ResourceClaim
	var parts []string
	for _, c := range r.Claims {
		if c.Report == nil || c.Report.State != StatePending {
			continue
		}
		if c.Report.Diagnosis == nil || len(c.Report.Diagnosis.FitsOn) == 0 {
			return nil // this claim alone already explains the wait
		}
		pending = append(pending, findClaim(snap, c.Report.Claim.Namespace, c.Report.Claim.Name))
		parts = append(parts, fmt.Sprintf("%q fits on %s", c.Name, strings.Join(c.Report.Diagnosis.FitsOn, ", ")))
	}
	if len(pending) < 2 {
		return nil
	}
	nodes, err := diagnosis.ClaimsTogether(ctx, snap, pending)
	if err != nil {
		return fmt.Errorf("diagnosing the claims of pod %s/%s together: %w", r.Namespace, r.Name, err)
	}
	if len(nodes) == 0 {
		r.Together = "each pending claim fits on its own, but no node can take all of them at once (" + strings.Join(parts, "; ") + ")"
	}
	return nil
}

func findClaim(snap *cluster.Snapshot, namespace, name string) *resourceapi.ResourceClaim {
	for _, c := range snap.Claims {
		if c.Namespace == namespace && c.Name == name {
			return c
		}
	}
	return nil
}

// Package clusterview renders the cluster model (pkg/cluster) for people
// and scripts: the per-node, per-card view of kubectl-tangram status, its
// table, JSON and YAML forms, and the consistency check the e2e suite runs
// against claim status. Only cmd/kubectl-tangram (and tests) use it.
package clusterview

import (
	"slices"
	"sort"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// ViewAPIVersion tags the JSON/YAML output so scripts can tell when its
// shape changes. Fields are only ever added within one version.
const ViewAPIVersion = "tangram.dev/cluster-view/v1"

// Card states.
const (
	// CardFree: nothing is allocated on the card.
	CardFree = string(cluster.Free)
	// CardPartial: some shares are allocated, memory is left for more.
	CardPartial = string(cluster.Partial)
	// CardFull: a claim holds the whole card, or its memory is all shared out.
	CardFull = string(cluster.Full)
)

// View is the cluster-wide picture of our GPUs. It is the stable output of
// `kubectl tangram status -o json|yaml`; docs/kubectl-tangram.md documents it.
type View struct {
	APIVersion string     `json:"apiVersion"`
	Nodes      []NodeView `json:"nodes"`
	Totals     Totals     `json:"totals"`
	// Pending lists claims of our device classes that are not allocated yet.
	Pending []PendingClaim `json:"pending"`
	// Gangs are the GpuGangs (all of them, or those with a member on the
	// --node node).
	Gangs []GangView `json:"gangs"`
	// Warnings are inconsistencies worth a look, e.g. a claim allocated a
	// device that no ResourceSlice publishes any more.
	Warnings []string `json:"warnings"`
}

// NodeView is one node with its cards.
type NodeView struct {
	Name   string     `json:"name"`
	Cards  []CardView `json:"cards"`
	Totals Totals     `json:"totals"`
	// ShareEnforcement is how hard the node holds a share to its limits
	// ("hard", "compute-only", "advisory"; its cards' shareEnforcement),
	// ShareEnforcementReason why not hard (a device.Reason… code) and
	// ShareBackend its sharing backend; empty when its cards publish none.
	ShareEnforcement       string `json:"shareEnforcement,omitempty"`
	ShareEnforcementReason string `json:"shareEnforcementReason,omitempty"`
	ShareBackend           string `json:"shareBackend,omitempty"`
}

// CardView is one GPU and what is allocated on it.
type CardView struct {
	// Device is the ResourceSlice device name, e.g. "gpu-3".
	Device       string `json:"device"`
	Pool         string `json:"pool"`
	UUID         string `json:"uuid"`
	ProductName  string `json:"productName"`
	NVLinkDomain string `json:"nvlinkDomain"`
	Shareable    bool   `json:"shareable"`
	// State is "free", "partial" or "full".
	State string `json:"state"`
	// MemoryBytes is the card's memory; MemoryUsedBytes the sum of what the
	// allocations consume (all of it for a whole-card allocation).
	MemoryBytes     int64 `json:"memoryBytes"`
	MemoryUsedBytes int64 `json:"memoryUsedBytes"`
	// ComputePercent is the card's compute capacity (100);
	// ComputeUsedPercent the sum of the shares' compute (100 when whole).
	ComputePercent     int64            `json:"computePercent"`
	ComputeUsedPercent int64            `json:"computeUsedPercent"`
	Allocations        []AllocationView `json:"allocations"`
	// Taints are the device's taints in its ResourceSlice (e.g. the
	// plugin's health taints, docs/health.md); on a card in MIG mode,
	// those of any of its partitions.
	Taints []TaintView `json:"taints,omitempty"`
	// MIG is set on a card in MIG mode, published as its partitions: its
	// allocations are the partitions claims hold.
	MIG *MIGCardView `json:"mig,omitempty"`
}

// TaintView is one device taint.
type TaintView struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
	// Since is when the taint was added, if known.
	Since string `json:"since,omitempty"`
}

func (t TaintView) String() string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + t.Effect
}

// AllocationView is one allocation result on a card.
type AllocationView struct {
	Claim cluster.ClaimRef `json:"claim"`
	// Request is the claim's request name ("gpu", or "gpus/whole" for a
	// sub-request).
	Request string `json:"request"`
	// ShareID is set for a share of a shareable card.
	ShareID string `json:"shareID"`
	// Whole is true when the claim holds the entire card.
	Whole bool `json:"whole"`
	// AdminAccess results observe a card without using it.
	AdminAccess    bool  `json:"adminAccess"`
	MemoryBytes    int64 `json:"memoryBytes"`
	ComputePercent int64 `json:"computePercent"`
	// Pods are the pods the claim is reserved for, "namespace/name".
	Pods []string `json:"pods"`
	// OtherConsumers are other objects the claim is reserved for, such as
	// the PodGroup of a gang: "podgroups.scheduling.k8s.io/namespace/name".
	OtherConsumers []string `json:"otherConsumers"`
	// Gang is the GpuGang ("namespace/name") whose member holds the claim,
	// "" when none.
	Gang string `json:"gang"`
	// MIG is the partition held, on a card in MIG mode.
	MIG *MIGAllocationView `json:"mig,omitempty"`
}

// PendingClaim is an unallocated claim and, when known, why it waits.
type PendingClaim struct {
	cluster.ClaimRef
	// Why is the diagnosis in one line; kubectl-tangram fills it for the
	// first pending claims (Build leaves it empty: it is pure and cheap).
	Why string `json:"why"`
}

// String is "namespace/name".
// Totals counts cards by state and sums memory.
type Totals struct {
	Cards           int   `json:"cards"`
	Free            int   `json:"free"`
	Partial         int   `json:"partial"`
	Full            int   `json:"full"`
	MemoryBytes     int64 `json:"memoryBytes"`
	MemoryUsedBytes int64 `json:"memoryUsedBytes"`
}

func (t *Totals) add(o Totals) {
	t.Cards += o.Cards
	t.Free += o.Free
	t.Partial += o.Partial
	t.Full += o.Full
	t.MemoryBytes += o.MemoryBytes
	t.MemoryUsedBytes += o.MemoryUsedBytes
}

// Options narrow the view.
type Options struct {
	// Node shows only this node when set.
	Node string
}

// Build makes the view of our driver's devices from a snapshot.
func Build(snap *cluster.Snapshot, opts Options) *View {
	inv := cluster.NewInventory(snap)
	v := &View{APIVersion: ViewAPIVersion, Nodes: []NodeView{}, Pending: []PendingClaim{}, Warnings: []string{}}
	var claimGang map[string]string
	v.Gangs, claimGang = gangViews(snap.Gangs, opts.Node)
	nodeIndex := map[string]int{}
	// A card in MIG mode is shown once, where its first partition is.
	type migKey struct {
		node  string
		index int64
	}
	migParts := map[migKey][]*cluster.DeviceState{}
	var migOrder []migKey
	for _, ds := range inv.Devices {
		if ds.Driver != device.DriverName || (opts.Node != "" && ds.Node != opts.Node) {
			continue
		}
		i, ok := nodeIndex[ds.Node]
		if !ok {
			i = len(v.Nodes)
			nodeIndex[ds.Node] = i
			v.Nodes = append(v.Nodes, NodeView{Name: ds.Node, Cards: []CardView{}})
		}
		if isMIGPartition(ds) {
			k := migKey{ds.Node, intAttribute(ds, device.AttrParentIndex)}
			if migParts[k] == nil {
				migOrder = append(migOrder, k)
				// A placeholder, filled below once all partitions are seen.
				v.Nodes[i].Cards = append(v.Nodes[i].Cards, CardView{Device: device.CardDeviceName(int(k.index))})
			}
			migParts[k] = append(migParts[k], ds)
			continue
		}
		v.Nodes[i].Cards = append(v.Nodes[i].Cards, cardView(ds, claimGang))
		if n := &v.Nodes[i]; ds.Shareable && n.ShareEnforcement == "" {
			n.ShareEnforcement = ds.StringAttribute(device.AttrShareEnforcement)
			n.ShareEnforcementReason = ds.StringAttribute(device.AttrShareEnforcementReason)
			n.ShareBackend = ds.StringAttribute(device.AttrShareBackend)
		}
	}
	for _, k := range migOrder {
		cards := v.Nodes[nodeIndex[k.node]].Cards
		j := slices.IndexFunc(cards, func(c CardView) bool {
			return c.Device == device.CardDeviceName(int(k.index)) && c.MIG == nil && c.UUID == ""
		})
		cards[j] = migCardView(migParts[k], claimGang)
	}
	for i := range v.Nodes {
		n := &v.Nodes[i]
		for _, c := range n.Cards {
			n.Totals.add(cardTotals(c))
		}
		v.Totals.add(n.Totals)
	}
	if opts.Node == "" {
		v.Pending = pendingClaims(snap)
	}
	for _, o := range inv.Orphans {
		if o.Result.Driver != device.DriverName {
			continue
		}
		v.Warnings = append(v.Warnings, "claim "+claimRef(o.Claim).String()+" holds "+o.Result.Pool+"/"+o.Result.Device+
			", which no current ResourceSlice publishes (driver restarted or node gone?)")
	}
	return v
}

func cardView(ds *cluster.DeviceState, claimGang map[string]string) CardView {
	mem := ds.Capacity(device.CapacityMemory)
	memUsed := ds.Used(device.CapacityMemory)
	comp := ds.Capacity(device.CapacityCompute)
	compUsed := ds.Used(device.CapacityCompute)
	c := CardView{
		Device:             ds.Device.Name,
		Pool:               ds.Pool,
		UUID:               ds.StringAttribute(device.AttrUUID),
		ProductName:        ds.StringAttribute(device.AttrProductName),
		NVLinkDomain:       ds.StringAttribute(device.AttrNVLinkDomain),
		Shareable:          ds.Shareable,
		MemoryBytes:        mem.Value(),
		MemoryUsedBytes:    memUsed.Value(),
		ComputePercent:     comp.Value(),
		ComputeUsedPercent: compUsed.Value(),
		Allocations:        []AllocationView{},
	}
	for _, t := range ds.Device.Taints {
		tv := TaintView{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}
		if t.TimeAdded != nil {
			tv.Since = t.TimeAdded.UTC().Format(time.RFC3339)
		}
		c.Taints = append(c.Taints, tv)
	}
	for _, a := range ds.Allocations {
		av := allocationView(a, claimGang)
		if a.Result.ShareID != nil {
			av.ShareID = string(*a.Result.ShareID)
		}
		if q, ok := a.Consumed[device.CapacityMemory]; ok {
			av.MemoryBytes = q.Value()
		}
		if q, ok := a.Consumed[device.CapacityCompute]; ok {
			av.ComputePercent = q.Value()
		}
		c.Allocations = append(c.Allocations, av)
	}
	c.State = string(ds.Use())
	return c
}

// allocationView is what every allocation shows: its claim, request,
// consumers and gang.
func allocationView(a cluster.Allocation, claimGang map[string]string) AllocationView {
	av := AllocationView{
		Claim:       claimRef(a.Claim),
		Request:     a.Result.Request,
		Whole:       a.Whole,
		AdminAccess: ptr.Deref(a.Result.AdminAccess, false),
	}
	av.Pods, av.OtherConsumers = Consumers(a.Claim)
	av.Gang = claimGang[a.Claim.Namespace+"/"+a.Claim.Name]
	return av
}

func cardTotals(c CardView) Totals {
	t := Totals{Cards: 1, MemoryBytes: c.MemoryBytes, MemoryUsedBytes: c.MemoryUsedBytes}
	switch c.State {
	case CardFree:
		t.Free = 1
	case CardPartial:
		t.Partial = 1
	default:
		t.Full = 1
	}
	return t
}

func claimRef(c *resourceapi.ResourceClaim) cluster.ClaimRef { return cluster.ClaimRefOf(c) }

// Consumers lists what a claim is reserved for: pods as "namespace/name",
// anything else (a gang's PodGroup) as "resource.group/namespace/name".
// Both are sorted.
func Consumers(c *resourceapi.ResourceClaim) (pods, others []string) {
	pods, others = []string{}, []string{}
	for _, r := range c.Status.ReservedFor {
		switch {
		case r.APIGroup == "" && r.Resource == "pods":
			pods = append(pods, c.Namespace+"/"+r.Name)
		case r.APIGroup == "":
			others = append(others, r.Resource+"/"+c.Namespace+"/"+r.Name)
		default:
			others = append(others, r.Resource+"."+r.APIGroup+"/"+c.Namespace+"/"+r.Name)
		}
	}
	sort.Strings(pods)
	sort.Strings(others)
	return pods, others
}

// pendingClaims lists unallocated claims that ask for one of our device
// classes (cluster.PendingClaims).
func pendingClaims(snap *cluster.Snapshot) []PendingClaim {
	out := []PendingClaim{}
	for _, c := range cluster.PendingClaims(snap) {
		out = append(out, PendingClaim{ClaimRef: claimRef(c)})
	}
	return out
}

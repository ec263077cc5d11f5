package clusterview

import (
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/names"
)

// ViewAPIVersion tags the JSON/YAML output so scripts can tell when its
// shape changes. Fields are only ever added within one version.
const ViewAPIVersion = "tangram.dev/cluster-view/v1"

// Card states.
const (
	// CardFree: nothing is allocated on the card.
	CardFree = "free"
	// CardPartial: some shares are allocated, memory is left for more.
	CardPartial = "partial"
	// CardFull: a claim holds the whole card, or its memory is all shared out.
	CardFull = "full"
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
	// plugin's health taints, docs/health.md).
	Taints []TaintView `json:"taints,omitempty"`
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
	Claim ClaimRef `json:"claim"`
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
}

// ClaimRef names a claim.
type ClaimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// PendingClaim is an unallocated claim and, when known, why it waits.
type PendingClaim struct {
	ClaimRef
	// Why is the diagnosis in one line; kubectl-tangram fills it for the
	// first pending claims (Build leaves it empty: it is pure and cheap).
	Why string `json:"why"`
}

// String is "namespace/name".
func (c ClaimRef) String() string { return c.Namespace + "/" + c.Name }

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
func Build(snap *Snapshot, opts Options) *View {
	inv := NewInventory(snap)
	v := &View{APIVersion: ViewAPIVersion, Nodes: []NodeView{}, Pending: []PendingClaim{}, Warnings: []string{}}
	var claimGang map[string]string
	v.Gangs, claimGang = gangViews(snap.Gangs, opts.Node)
	nodeIndex := map[string]int{}
	for _, ds := range inv.Devices {
		if ds.Driver != names.DriverName || (opts.Node != "" && ds.Node != opts.Node) {
			continue
		}
		i, ok := nodeIndex[ds.Node]
		if !ok {
			i = len(v.Nodes)
			nodeIndex[ds.Node] = i
			v.Nodes = append(v.Nodes, NodeView{Name: ds.Node, Cards: []CardView{}})
		}
		v.Nodes[i].Cards = append(v.Nodes[i].Cards, cardView(ds, claimGang))
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
		if o.Result.Driver != names.DriverName {
			continue
		}
		v.Warnings = append(v.Warnings, "claim "+claimRef(o.Claim).String()+" holds "+o.Result.Pool+"/"+o.Result.Device+
			", which no current ResourceSlice publishes (driver restarted or node gone?)")
	}
	return v
}

func cardView(ds *DeviceState, claimGang map[string]string) CardView {
	mem := ds.Capacity(names.CapacityMemory)
	memUsed := ds.Used(names.CapacityMemory)
	comp := ds.Capacity(names.CapacityCompute)
	compUsed := ds.Used(names.CapacityCompute)
	c := CardView{
		Device:             ds.Device.Name,
		Pool:               ds.Pool,
		UUID:               ds.StringAttribute(names.AttrUUID),
		ProductName:        ds.StringAttribute(names.AttrProductName),
		NVLinkDomain:       ds.StringAttribute(names.AttrNVLinkDomain),
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
		av := AllocationView{
			Claim:       claimRef(a.Claim),
			Request:     a.Result.Request,
			Whole:       a.Whole,
			AdminAccess: ptr.Deref(a.Result.AdminAccess, false),
		}
		av.Pods, av.OtherConsumers = Consumers(a.Claim)
		av.Gang = claimGang[a.Claim.Namespace+"/"+a.Claim.Name]
		if a.Result.ShareID != nil {
			av.ShareID = string(*a.Result.ShareID)
		}
		if q, ok := a.Consumed[names.CapacityMemory]; ok {
			av.MemoryBytes = q.Value()
		}
		if q, ok := a.Consumed[names.CapacityCompute]; ok {
			av.ComputePercent = q.Value()
		}
		c.Allocations = append(c.Allocations, av)
	}
	switch {
	case !ds.inUse():
		c.State = CardFree
	case ds.HeldWhole() || !ds.Shareable || (mem.Sign() > 0 && memUsed.Cmp(wholeThreshold(ds.Device.Capacity[names.CapacityMemory])) >= 0):
		c.State = CardFull
	default:
		c.State = CardPartial
	}
	return c
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

func claimRef(c *resourceapi.ResourceClaim) ClaimRef {
	return ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)}
}

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
// classes (directly or in a firstAvailable alternative).
func pendingClaims(snap *Snapshot) []PendingClaim {
	ours := OurClasses(snap.Classes)
	out := []PendingClaim{}
	for _, c := range sortedClaims(snap.Claims) {
		if c.Status.Allocation != nil || c.DeletionTimestamp != nil {
			continue
		}
		if claimUsesClasses(c, ours) {
			out = append(out, PendingClaim{ClaimRef: claimRef(c)})
		}
	}
	return out
}

// OurClasses is the set of DeviceClass names that select our driver's
// devices: the two the chart publishes, plus any class whose selectors
// name our driver.
func OurClasses(classes []*resourceapi.DeviceClass) map[string]bool {
	ours := map[string]bool{names.DeviceClassName: true, names.SharedDeviceClassName: true}
	for _, c := range classes {
		for _, s := range c.Spec.Selectors {
			if s.CEL != nil && strings.Contains(s.CEL.Expression, names.DriverName) {
				ours[c.Name] = true
			}
		}
	}
	return ours
}

func claimUsesClasses(c *resourceapi.ResourceClaim, classes map[string]bool) bool {
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil && classes[r.Exactly.DeviceClassName] {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if classes[sub.DeviceClassName] {
				return true
			}
		}
	}
	return false
}

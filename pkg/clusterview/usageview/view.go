package usageview

import (
	"bytes"
	"cmp"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// View is what `kubectl tangram top` shows: per node, what its plugin's
// last usage round read.
type View struct {
	Nodes []Node `json:"nodes"`
	// Notes say what the view lacks (cards that could not be named).
	Notes []string `json:"notes,omitempty"`
}

// Node is one node's last round, or why it is not known.
type Node struct {
	Name string `json:"name"`
	// Pod is the kubelet plugin pod whose metrics were read.
	Pod string `json:"pod,omitempty"`
	// Error says why the node's usage is not known: its metrics could not
	// be read, or the plugin published no round.
	Error string `json:"error,omitempty"`
	// ReadAt is when the plugin read the cards' processes, AgeSeconds how
	// long before the view was built.
	ReadAt     *time.Time `json:"readAt,omitempty"`
	AgeSeconds float64    `json:"ageSeconds,omitempty"`
	Cards      []Card     `json:"cards,omitempty"`
	// OtherDevices are devices in use whose card is not known (the node's
	// ResourceSlices did not name it).
	OtherDevices []Device `json:"otherDevices,omitempty"`
}

// Card is one card's use.
type Card struct {
	// Name is the card's device name ("gpu-0"), "" when not known.
	Name string `json:"name,omitempty"`
	UUID string `json:"uuid"`
	// UsedBytes is what all its processes use: claims', unaccounted and
	// the node's own.
	UsedBytes int64 `json:"usedBytes"`
	// Devices are the prepared devices with a process, busiest first.
	Devices []Device `json:"devices,omitempty"`
	// Unaccounted processes are those no prepared claim accounts for.
	UnaccountedProcesses int   `json:"unaccountedProcesses"`
	UnaccountedBytes     int64 `json:"unaccountedBytes"`
	// NodeProcesses are the node's own daemons' (MPS).
	NodeProcesses int `json:"nodeProcesses"`
	// AmbiguousProcesses are counted on the first of several devices their
	// pod holds on the card.
	AmbiguousProcesses int `json:"ambiguousProcesses"`
}

// Idle is a card on which nothing runs.
func (c Card) Idle() bool {
	return c.UsedBytes == 0 && len(c.Devices) == 0 && c.UnaccountedProcesses == 0 && c.NodeProcesses == 0
}

// Device is what the processes of one prepared device's pods use of it.
type Device struct {
	Namespace string `json:"namespace"`
	Claim     string `json:"claim"`
	// Device is the allocated device's name: the card's for a whole card
	// or a share, the partition's for MIG.
	Device    string `json:"device"`
	UsedBytes int64  `json:"usedBytes"`
	// Share: a share of the card, given AllowedBytes; Over when it uses
	// more.
	Share        bool  `json:"share,omitempty"`
	AllowedBytes int64 `json:"allowedBytes,omitempty"`
	Over         bool  `json:"over,omitempty"`
	// SMPercent is the part of the card's SMs its processes kept busy,
	// where NVML gives it.
	SMPercent *int `json:"smPercent,omitempty"`
}

// Fraction is a share's use of what it was given, 0 for other devices.
func (d Device) Fraction() float64 {
	if !d.Share || d.AllowedBytes <= 0 {
		return 0
	}
	return float64(d.UsedBytes) / float64(d.AllowedBytes)
}

// busierFirst orders devices: shares over their memory, then shares by
// the fraction of what they were given they use, then the other devices
// by memory used; then by name.
func busierFirst(a, b Device) int {
	if c := boolFirst(a.Over, b.Over); c != 0 {
		return c
	}
	if c := boolFirst(a.Share, b.Share); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Fraction(), a.Fraction()); c != 0 {
		return c
	}
	if c := cmp.Compare(b.UsedBytes, a.UsedBytes); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Device, b.Device))
}

func boolFirst(a, b bool) int {
	switch {
	case a && !b:
		return -1
	case b && !a:
		return 1
	}
	return 0
}

// CardNames are each node's card names by UUID: node → UUID → "gpu-0".
type CardNames map[string]map[string]string

// CardNamesOf reads the card names from the driver's ResourceSlices: a
// card's device carries its UUID, a MIG partition its card's.
func CardNamesOf(slices []resourceapi.ResourceSlice) CardNames {
	names := CardNames{}
	for _, s := range slices {
		if s.Spec.Driver != device.DriverName || s.Spec.NodeName == nil {
			continue
		}
		node := *s.Spec.NodeName
		for _, d := range s.Spec.Devices {
			ref, err := device.ParseDeviceName(d.Name)
			if err != nil {
				continue
			}
			uuid := device.StringAttribute(d, device.AttrUUID)
			if ref.MIG != nil {
				uuid = device.StringAttribute(d, device.AttrParentUUID)
			}
			if uuid == "" {
				continue
			}
			if names[node] == nil {
				names[node] = map[string]string{}
			}
			names[node][uuid] = device.CardDeviceName(ref.Index)
		}
	}
	return names
}

// Source is one kubelet plugin pod's /metrics, or why it could not be
// read.
type Source struct {
	// Node is the pod's node, Pod its name.
	Node, Pod string
	Metrics   []byte
	Err       error
}

// Build makes the view of what the plugins' metrics say at now: one node
// per node (of two pods on a node, as in a rolling update, the one read
// last), sorted by name, each device on its card where names tell it.
func Build(sources []Source, names CardNames, now time.Time) *View {
	byNode := map[string]Node{}
	for _, src := range sources {
		n := node(src, names, now)
		if old, ok := byNode[n.Name]; ok && !newer(n, old) {
			continue
		}
		byNode[n.Name] = n
	}
	v := &View{Nodes: []Node{}}
	for _, n := range byNode {
		v.Nodes = append(v.Nodes, n)
	}
	slices.SortFunc(v.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return v
}

// newer: a read round beats none, a later round an earlier one.
func newer(n, old Node) bool {
	switch {
	case n.ReadAt == nil:
		return false
	case old.ReadAt == nil:
		return true
	}
	return n.ReadAt.After(*old.ReadAt)
}

func node(src Source, names CardNames, now time.Time) Node {
	failed := Node{Name: src.Node, Pod: src.Pod}
	if src.Err != nil {
		failed.Error = src.Err.Error()
		return failed
	}
	n, err := Parse(bytes.NewReader(src.Metrics))
	if err != nil {
		failed.Error = err.Error()
		return failed
	}
	if n.ReadAt == nil {
		failed.Error = "no GPU usage published: the plugin does not watch it (kubeletPlugin.usage), or its first round has not run yet"
		return failed
	}
	if n.Name == "" {
		n.Name = src.Node
	}
	n.Pod = src.Pod
	n.AgeSeconds = max(now.Sub(*n.ReadAt).Round(time.Second).Seconds(), 0)
	place(&n, names[n.Name])
	return n
}

// place puts each device on its card: the device's name says the card's
// index, the slices' names the index's UUID; on a node of one card there
// is no doubt either.
func place(n *Node, names map[string]string) {
	byIndex := map[int]int{}
	for i := range n.Cards {
		c := &n.Cards[i]
		if c.Name == "" {
			c.Name = names[c.UUID]
		}
		if ref, err := device.ParseDeviceName(c.Name); err == nil {
			byIndex[ref.Index] = i
		}
	}
	var other []Device
	for _, d := range n.OtherDevices {
		i, ok := -1, false
		if ref, err := device.ParseDeviceName(d.Device); err == nil {
			i, ok = byIndex[ref.Index]
		}
		if !ok && len(n.Cards) == 1 {
			i, ok = 0, true
		}
		if !ok {
			other = append(other, d)
			continue
		}
		n.Cards[i].Devices = append(n.Cards[i].Devices, d)
	}
	n.OtherDevices = other
	for i := range n.Cards {
		slices.SortFunc(n.Cards[i].Devices, busierFirst)
	}
	slices.SortFunc(n.Cards, byCard)
}

// byCard orders named cards by index, then the others by UUID.
func byCard(a, b Card) int {
	ra, ea := device.ParseDeviceName(a.Name)
	rb, eb := device.ParseDeviceName(b.Name)
	switch {
	case ea == nil && eb == nil:
		if c := cmp.Compare(ra.Index, rb.Index); c != 0 {
			return c
		}
	case ea == nil:
		return -1
	case eb == nil:
		return 1
	}
	return cmp.Compare(a.UUID, b.UUID)
}

package diagnosis

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/cluster"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
)

// requestAnalysis is what the cluster offers one request, taken alone.
type requestAnalysis struct {
	req exactRequest
	// problem explains why the request cannot be met anywhere; empty when
	// it can be met alone on the nodes in fitsOn.
	problem string
	fitsOn  []string
}

// analyse looks at one request against the inventory: which devices match
// its class and selectors, which of them have room for it, and whether some
// node has enough of them (in one group when a matchAttribute applies).
func analyse(ctx context.Context, inv *cluster.Inventory, classes dra.ClassLister,
	claim *resourceapi.ResourceClaim, r exactRequest) requestAnalysis {
	a := requestAnalysis{req: r}
	m, problem := newMatcher(classes, r)
	if problem != "" {
		a.problem = problem
		return a
	}
	var matching []*cluster.DeviceState
	for _, d := range inv.Devices {
		if m.matches(ctx, d) {
			matching = append(matching, d)
		}
	}
	if len(matching) == 0 {
		a.problem = fmt.Sprintf("class %s with the request's selectors matches none of the %d devices in the cluster",
			r.spec.DeviceClassName, len(inv.Devices)) + enforcementHint(r.spec.DeviceClassName, m.exprs, inv.Devices)
		if !strings.Contains(a.problem, "; class") {
			a.problem += backendHint(r.spec.DeviceClassName, m.exprs, inv.Devices)
		}
		return a
	}

	var tainted []string
	untainted := matching[:0:0]
	for _, d := range matching {
		if taint, ok := untoleratedTaint(r, d); ok {
			tainted = append(tainted, deviceName(d)+" ("+taint+")")
			continue
		}
		untainted = append(untainted, d)
	}
	if len(untainted) == 0 {
		a.problem = fmt.Sprintf("every matching %s has a taint the request does not tolerate: %s",
			cardWord(r, 1), listFew(tainted))
		return a
	}
	matching = untainted

	usable := map[string][]*cluster.DeviceState{}
	var withRoom []*cluster.DeviceState
	for _, d := range matching {
		if hasRoom(r, d) {
			usable[d.Node] = append(usable[d.Node], d)
			withRoom = append(withRoom, d)
		}
	}
	if len(withRoom) == 0 {
		a.problem = noRoom(r, matching)
		return a
	}

	want := r.count()
	attr := matchAttributeFor(claim, r)
	type nodeBest struct {
		node string
		n    int
	}
	var best []nodeBest
	for node, devs := range usable {
		n := len(devs)
		if attr != "" {
			n = largestGroup(devs, attr)
		}
		if want == 0 {
			// allocationMode All: every matching device of the node.
			if n == countOnNode(matching, node) {
				a.fitsOn = append(a.fitsOn, node)
			}
			continue
		}
		if int64(n) >= want {
			a.fitsOn = append(a.fitsOn, node)
		}
		best = append(best, nodeBest{node, n})
	}
	sort.Strings(a.fitsOn)
	if len(a.fitsOn) > 0 {
		return a
	}
	if want == 0 {
		a.problem = "allocationMode All needs every matching device of a node free, and every node has some in use"
		return a
	}
	sort.Slice(best, func(i, j int) bool {
		if best[i].n != best[j].n {
			return best[i].n > best[j].n
		}
		return cluster.NaturalLess(best[i].node, best[j].node)
	})
	top := best[0].n
	var topNodes []string
	for _, b := range best {
		if b.n == top {
			topNodes = append(topNodes, b.node)
		}
	}
	where := listFew(topNodes)
	if attr == "" {
		a.problem = fmt.Sprintf("needs %d %s on one node: the most any node has free is %d (%s)", want, cardWord(r, want), top, where)
		return a
	}
	a.problem = fmt.Sprintf("count %d with matchAttribute %s: the largest free %s has %d %s (%s)",
		want, short(attr), groupWord(attr), top, cardWord(r, int64(top)), where)
	return a
}

// untoleratedTaint returns the first NoSchedule or NoExecute taint of the
// device that the request does not tolerate, as "key=value:Effect". Other
// effects do not keep the allocator away.
func untoleratedTaint(r exactRequest, d *cluster.DeviceState) (string, bool) {
	for _, t := range d.Device.Taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		tolerated := false
		for _, tol := range r.spec.Tolerations {
			tolerated = tolerated || resourceclaim.ToleratesTaint(tol, t)
		}
		if !tolerated {
			return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect), true
		}
	}
	return "", false
}

// hasRoom reports whether one more allocation of the request fits on the
// device: an unshared free device, or a shareable one with enough of every
// capacity left.
func hasRoom(r exactRequest, d *cluster.DeviceState) bool {
	needs, ok := need(r, d)
	if !ok {
		return false
	}
	if _, over := overMax(needs, d); over {
		return false
	}
	admin := ptr.Deref(r.spec.AdminAccess, false)
	if admin && !d.Shareable {
		// Admin access skips the allocator's "in use" check, and a card
		// without allowMultipleAllocations has no consumed capacity to
		// check it against.
		return true
	}
	for name, q := range needs {
		free := d.Free(name)
		if q.Cmp(free) > 0 {
			return false
		}
	}
	if !d.Shareable {
		// A monitoring (admin access) result does not make a card busy.
		return !d.InUse()
	}
	// On a shareable card the 1.37 allocator checks an admin request's
	// capacity beside the holders' (above), nothing more.
	return admin || !d.HeldWhole()
}

// noRoom explains why no matching device has room: the request is larger
// than any card, or the capacity that runs out first and where the most of
// it is left.
func noRoom(r exactRequest, matching []*cluster.DeviceState) string {
	if problem := adminNoRoom(r, matching); problem != "" {
		return problem
	}
	wholeCard := r.spec.Capacity == nil || len(r.spec.Capacity.Requests) == 0
	if wholeCard {
		held, shared := 0, 0
		for _, d := range matching {
			switch {
			case d.HeldWhole() || (!d.Shareable && d.InUse()):
				held++
			case d.InUse():
				shared++
			}
		}
		return fmt.Sprintf("needs a whole %s, and none of the %d matching %s is entirely free (%d held whole, %d partly shared)",
			cardWord(r, 1), len(matching), cardWord(r, int64(len(matching))), held, shared)
	}

	var sized []*cluster.DeviceState
	var tooBig resourceapi.QualifiedName
	var tooBigNeed resource.Quantity
	for _, d := range matching {
		needs, ok := need(r, d)
		if !ok {
			continue
		}
		if name, over := overMax(needs, d); over {
			tooBig, tooBigNeed = name, needs[name]
			continue
		}
		sized = append(sized, d)
	}
	if len(sized) == 0 {
		if tooBig == "" {
			return fmt.Sprintf("asks for capacity the matching devices do not publish (%s)", requestedNames(r))
		}
		largest := matching[0]
		for _, d := range matching[1:] {
			c := d.Capacity(tooBig)
			if c.Cmp(largest.Capacity(tooBig)) > 0 {
				largest = d
			}
		}
		return fmt.Sprintf("asks for %s per card, more than any matching card can give: the largest has %s (%s)",
			quantityText(tooBig, tooBigNeed), quantityText(tooBig, largest.Capacity(tooBig)), deviceName(largest))
	}

	// Walk the capacities in the order people think about them and report
	// the first one no remaining card has enough of.
	candidates := sized
	for _, name := range capacityOrder(sized) {
		var next []*cluster.DeviceState
		var best *cluster.DeviceState
		var bestFree, needed resource.Quantity
		for _, d := range candidates {
			needs, _ := need(r, d)
			q, ok := needs[name]
			if !ok {
				next = append(next, d)
				continue
			}
			needed = q
			free := d.Free(name)
			if d.HeldWhole() {
				free = resource.Quantity{}
			}
			if free.Cmp(q) >= 0 {
				next = append(next, d)
			}
			if best == nil || free.Cmp(bestFree) > 0 {
				best, bestFree = d, free
			}
		}
		if len(next) > 0 {
			candidates = next
			continue
		}
		among := "card"
		if len(candidates) < len(sized) {
			among = "card with enough memory"
		}
		if bestFree.IsZero() {
			return fmt.Sprintf("no %s has %s free: all %d of them are fully used", among, quantityText(name, needed), len(candidates))
		}
		return fmt.Sprintf("no %s has %s free: the most left is %s on %s", among, quantityText(name, needed),
			quantityText(name, bestFree), deviceName(best))
	}
	return "no matching card has room for it"
}

// adminNoRoom explains an admin-access request that does not ask for
// memory 0 and finds no room: the form the Kubernetes docs show (no
// capacity) asks for all of a shareable card's memory, and the 1.37
// allocator checks it beside the holders (docs/resourceslices.md). The
// chart's claim-requests policy refuses such a request at creation; this is
// what a cluster without the policies sees. "" when it does not apply.
func adminNoRoom(r exactRequest, matching []*cluster.DeviceState) string {
	if !ptr.Deref(r.spec.AdminAccess, false) {
		return ""
	}
	var requests map[resourceapi.QualifiedName]resource.Quantity
	if r.spec.Capacity != nil {
		requests = r.spec.Capacity.Requests
	}
	var asked string
	if mem, ok := requests[device.CapacityMemory]; ok {
		if mem.IsZero() {
			return ""
		}
		asked = "asks for " + quantityText(device.CapacityMemory, mem)
	} else {
		asked = "names no memory, which asks for all of it"
	}
	shareable := 0
	for _, d := range matching {
		if d.Shareable {
			shareable++
		}
	}
	if shareable == 0 {
		return ""
	}
	return fmt.Sprintf("has adminAccess: true but %s: the 1.37 scheduler checks that an admin request fits beside the holders of a shared card, "+
		"and none of the %d matching shared %s has that free; add capacity: {requests: {memory: \"0\"}} to the request (admin access takes nothing from the card)",
		asked, shareable, cardWord(r, int64(shareable)))
}

// capacityOrder is memory, then compute, then the rest by name.
func capacityOrder(devs []*cluster.DeviceState) []resourceapi.QualifiedName {
	seen := map[resourceapi.QualifiedName]bool{}
	var rest []string
	for _, d := range devs {
		for name := range d.Device.Capacity {
			if !seen[name] {
				seen[name] = true
				if name != device.CapacityMemory && name != device.CapacityCompute {
					rest = append(rest, string(name))
				}
			}
		}
	}
	sort.Strings(rest)
	var out []resourceapi.QualifiedName
	for _, n := range []resourceapi.QualifiedName{device.CapacityMemory, device.CapacityCompute} {
		if seen[n] {
			out = append(out, n)
		}
	}
	for _, n := range rest {
		out = append(out, resourceapi.QualifiedName(n))
	}
	return out
}

func requestedNames(r exactRequest) string {
	var out []string
	if r.spec.Capacity != nil {
		for name := range r.spec.Capacity.Requests {
			out = append(out, string(name))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// matchAttributeFor returns the attribute of a matchAttribute constraint
// that applies to the request (all requests, or this one by name).
func matchAttributeFor(claim *resourceapi.ResourceClaim, r exactRequest) string {
	base, _, _ := strings.Cut(r.name, "/")
	for _, c := range claim.Spec.Devices.Constraints {
		if c.MatchAttribute == nil {
			continue
		}
		if len(c.Requests) == 0 {
			return string(*c.MatchAttribute)
		}
		for _, name := range c.Requests {
			if name == base || name == r.name {
				return string(*c.MatchAttribute)
			}
		}
	}
	return ""
}

// largestGroup is the size of the largest set of devices with the same
// value of attr; devices without it belong to no group.
func largestGroup(devs []*cluster.DeviceState, attr string) int {
	groups := map[string]int{}
	top := 0
	for _, d := range devs {
		a, ok := d.Attribute(resourceapi.QualifiedName(attr))
		if !ok {
			continue
		}
		key := cluster.AttributeString(a)
		groups[key]++
		top = max(top, groups[key])
	}
	return top
}

func countOnNode(devs []*cluster.DeviceState, node string) int {
	n := 0
	for _, d := range devs {
		if d.Node == node {
			n++
		}
	}
	return n
}

func groupWord(attr string) string {
	if short(attr) == device.AttrNVLinkDomain {
		return "NVLink domain"
	}
	return "group with equal " + short(attr)
}

// cardWord says "card(s)" for our GPUs and "device(s)" for others.
func cardWord(r exactRequest, n int64) string {
	word := "device"
	if device.IsTangramClass(r.spec.DeviceClassName) {
		word = "card"
	}
	if n != 1 {
		word += "s"
	}
	return word
}

// deviceName is "node/gpu-3", or "pool/gpu-3" for a device on no single node.
func deviceName(d *cluster.DeviceState) string {
	if d.Node != "" {
		return d.Node + "/" + d.Device.Name
	}
	return d.Pool + "/" + d.Device.Name
}

// listFew names up to three items (nodes, cards) and counts the rest,
// so a message stays one line on a large cluster.
func listFew(nodes []string) string {
	const shown = 3
	if len(nodes) <= shown {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:shown], ", "), len(nodes)-shown)
}

// Package usage attributes what runs on a node's GPUs to the claims the
// plugin prepared (issue 39, first part): each GPU process NVML reports is
// mapped through its cgroup to its pod (pkg/plugin/podcgroup) and through
// the pod's claims to the prepared device it runs on, so an admin can see
// what each share really uses, which share exceeds its memory, and which
// process no claim accounts for. Attribute is pure; reading NVML
// (gpu.ProcessLister), /proc and the node's pods is the Watcher's; serving
// and telling what a round found, Metrics' and the Reporter's
// (docs/observability.md).
package usage

import (
	"cmp"
	"maps"
	"slices"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Inputs are what one attribution looks at, read at about the same time.
type Inputs struct {
	// Processes are what NVML reports (gpu.ProcessLister).
	Processes []gpu.Process
	// PodOf is the UID of each process's pod, "" for a process outside
	// any pod. A process without an entry exited before its cgroup was
	// read (podcgroup.ErrProcessGone) and is left out.
	PodOf map[int]string
	// ClaimsOf are the claims each pod uses, by pod UID, each as
	// "namespace/name" (a pod's status.resourceClaimStatuses name them).
	ClaimsOf map[string][]string
	// Records are the plugin's prepared claims, by UID.
	Records map[string]prepared.Claim
	// NodePods are the pods of the node's own daemons (the plugin's, whose
	// children the MPS daemon and servers are with --mps-daemon=process,
	// and the MPS daemon's pod), by UID: their processes' use is the node's.
	NodePods map[string]bool
}

// Use is what the processes of one prepared device's pods use of it.
type Use struct {
	ClaimUID, Namespace, Name string
	Device                    prepared.Device
	// PIDs are the processes attributed to the device, in ascending order
	// (a device is one card and GPU instance, the order processes are
	// attributed in).
	PIDs []int
	// Pods are the UIDs of their pods, in the order first seen.
	Pods []string
	// UsedBytes sums their memory; UsedKnown is false when NVML did not
	// say it for one of them (then UsedBytes is a lower bound).
	UsedBytes int64
	UsedKnown bool
	// SMPercent sums the part of the card's streaming multiprocessors its
	// processes kept busy, when SMKnown: NVML gave it for each of them
	// (never in MIG mode; under MPS per client unverified,
	// docs/observability.md).
	SMPercent int
	SMKnown   bool
	// AllowedBytes is, for a share, the memory it was given or, when
	// every process counted on it came from a pod holding several shares
	// of the card (Report.Ambiguous), what those shares were given
	// together: NVML does not say which share such a process uses, so the
	// pod's use is held against all it holds. 0 for a whole card, a MIG
	// partition (the GPU holds it) or admin access.
	AllowedBytes int64
	// Over is set on a share using more memory than AllowedBytes.
	Over bool
}

// Stray is a GPU process no prepared claim accounts for: it runs outside
// any pod, or its pod holds no claim on that card.
type Stray struct {
	gpu.Process
	// Pod is the process's pod UID, "" outside any pod.
	Pod string
}

// Report is one attribution.
type Report struct {
	// Uses has an entry for every prepared device with a process, by
	// claim UID then device order.
	Uses []Use
	// Strays are the processes no claim accounts for, by card and PID.
	Strays []Stray
	// Node are the node's own daemons' processes.
	Node []gpu.Process
	// Ambiguous are the processes whose pod holds several devices of the
	// card: what NVML reports does not say which one a process serves, so
	// each was given to the first (by claim name, then device order).
	Ambiguous []gpu.Process
}

// Attribute maps each process to the prepared device its pod holds on
// the card it runs on.
func Attribute(in Inputs) Report {
	type key struct {
		claim string
		index int
	}
	uses := map[key]*Use{}
	// plain are the uses with a process whose pod holds nothing else of
	// the card: their pods get no allowance beyond the device's own.
	plain := map[key]bool{}
	// A claim deleted and made again under its name may have two records
	// for a while: the completed one is the claim the pods run with.
	byName := map[string]string{}
	for _, uid := range slices.Sorted(maps.Keys(in.Records)) {
		rec := in.Records[uid]
		name := rec.Namespace + "/" + rec.Name
		if had, ok := byName[name]; !ok || in.Records[had].State != prepared.PrepareCompleted && rec.State == prepared.PrepareCompleted {
			byName[name] = uid
		}
	}
	var r Report
	for _, p := range sortedProcesses(in.Processes) {
		pod, alive := in.PodOf[p.PID]
		switch {
		case !alive:
			continue
		case pod != "" && in.NodePods[pod]:
			r.Node = append(r.Node, p)
			continue
		case pod == "":
			r.Strays = append(r.Strays, Stray{Process: p})
			continue
		}
		var held []key
		for _, claim := range slices.Sorted(slices.Values(in.ClaimsOf[pod])) {
			uid, ok := byName[claim]
			if !ok {
				continue
			}
			for i, dev := range in.Records[uid].Devices {
				if runsOn(p, dev) {
					held = append(held, key{uid, i})
				}
			}
		}
		if len(held) == 0 {
			r.Strays = append(r.Strays, Stray{Process: p, Pod: pod})
			continue
		}
		var heldTogether int64
		if len(held) > 1 {
			r.Ambiguous = append(r.Ambiguous, p)
			for _, h := range held {
				if dev := in.Records[h.claim].Devices[h.index]; isShare(dev) {
					heldTogether += dev.MemoryBytes
				}
			}
		}
		// held is in claim-name order: a pod's process goes to the same
		// device from one read to the next.
		k := held[0]
		u := uses[k]
		if u == nil {
			rec := in.Records[k.claim]
			u = &Use{ClaimUID: k.claim, Namespace: rec.Namespace, Name: rec.Name, Device: rec.Devices[k.index], UsedKnown: true, SMKnown: true}
			uses[k] = u
		}
		u.PIDs = append(u.PIDs, p.PID)
		if len(held) == 1 {
			plain[k] = true
		}
		u.AllowedBytes = max(u.AllowedBytes, heldTogether)
		if !slices.Contains(u.Pods, pod) {
			u.Pods = append(u.Pods, pod)
		}
		if p.UsedBytes < 0 {
			u.UsedKnown = false
		} else {
			u.UsedBytes += p.UsedBytes
		}
		u.SMKnown = u.SMKnown && p.SMKnown
		u.SMPercent = min(u.SMPercent+p.SMPercent, 100)
	}
	for _, k := range slices.SortedFunc(maps.Keys(uses), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.claim, b.claim), cmp.Compare(a.index, b.index))
	}) {
		u := uses[k]
		switch {
		case isShare(u.Device) && plain[k]:
			// Another pod uses the share alone: what the share was
			// given is all its processes may use.
			u.AllowedBytes = u.Device.MemoryBytes
		case isShare(u.Device):
			u.AllowedBytes = max(u.AllowedBytes, u.Device.MemoryBytes)
		default:
			u.AllowedBytes = 0
		}
		u.Over = u.AllowedBytes > 0 && u.UsedBytes > u.AllowedBytes
		r.Uses = append(r.Uses, *u)
	}
	return r
}

func isShare(dev prepared.Device) bool {
	kind := dev.Kind()
	return kind == prepared.KindShare || kind == prepared.KindMPSShare
}

// runsOn reports whether process p runs on prepared device dev: the same
// card and, for a MIG partition, its GPU instance.
func runsOn(p gpu.Process, dev prepared.Device) bool {
	if dev.GPUUUID != p.Card {
		return false
	}
	if dev.MIG != nil {
		return dev.MIG.Created() && dev.MIG.GPUInstanceIDValue() == p.GPUInstance
	}
	return p.GPUInstance == gpu.NoGPUInstance
}

func sortedProcesses(in []gpu.Process) []gpu.Process {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b gpu.Process) int {
		return cmp.Or(cmp.Compare(a.Card, b.Card), cmp.Compare(a.GPUInstance, b.GPUInstance), cmp.Compare(a.PID, b.PID))
	})
	return out
}

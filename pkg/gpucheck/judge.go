package gpucheck

import (
	"fmt"
	"sort"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// JudgeLimitedClient judges a client run under a memory limit of limitMiB
// that tried to allocate more: it must have been refused, never holding
// more than the limit, and must have got at least half of it (the limit
// also covers the context's own memory, so not all of it).
func JudgeLimitedClient(limitMiB int64, log string) Outcome {
	r, err := ParseAllocLog(log)
	if err != nil {
		return Fail("the client reported no result: %v", err)
	}
	got := fmt.Sprintf("the client allocated %d MiB under a %d MiB limit (CUDA sees %d device(s), %d MiB total)", r.AllocatedMiB, limitMiB, r.Devices, r.TotalMiB)
	switch {
	case !r.Refused:
		return Fail("%s and was never refused: the limit is not enforced", got)
	case r.AllocatedMiB > limitMiB:
		return Fail("%s: more than the limit before the refusal", got)
	case r.AllocatedMiB < limitMiB/2:
		return Fail("%s: refused (CUresult %d) long before the limit", got, r.Error)
	}
	return Pass("%s, then refused (CUresult %d)", got, r.Error)
}

// SpecPaths lists the host paths CDI edits name: device nodes (their host
// path where given), mount sources and hook programs, each once, sorted.
func SpecPaths(edits ...cdispec.ContainerEdits) []string {
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" {
			seen[p] = true
		}
	}
	for _, e := range edits {
		for _, d := range e.DeviceNodes {
			if d.HostPath != "" {
				add(d.HostPath)
			} else {
				add(d.Path)
			}
		}
		for _, m := range e.Mounts {
			add(m.HostPath)
		}
		for _, h := range e.Hooks {
			add(h.Path)
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// SpecPathsOutcome reports which named paths do not exist (exists is
// os.Stat's view, injected for tests).
func SpecPathsOutcome(cards int, paths []string, exists func(string) bool) Outcome {
	if len(paths) == 0 {
		return Fail("the generated CDI edits name no path at all")
	}
	var missing []string
	for _, p := range paths {
		if !exists(p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return Fail("%d of %d paths named by the CDI edits do not exist: %s", len(missing), len(paths), strings.Join(missing, ", "))
	}
	return Pass("common edits and %d card(s): all %d named paths (device nodes, driver files, hooks) exist", cards, len(paths))
}

// HealthOutcome judges the health monitor's registration: every card must
// be registered for XID critical errors, the monitor's essential event.
func HealthOutcome(regs []gpu.HealthRegistration, cards int, xid string) Outcome {
	if len(regs) != cards {
		return Fail("registered %d card(s), the node has %d", len(regs), cards)
	}
	var bad, good []string
	for _, r := range regs {
		has := false
		for _, t := range r.Registered {
			if t == xid {
				has = true
			}
		}
		switch {
		case r.Error != "":
			bad = append(bad, fmt.Sprintf("gpu %d: %s", r.Index, r.Error))
		case !has:
			bad = append(bad, fmt.Sprintf("gpu %d: not registered for %s (supports %s)", r.Index, xid, strings.Join(r.Supported, ",")))
		default:
			good = append(good, fmt.Sprintf("gpu %d: %s", r.Index, strings.Join(r.Registered, ",")))
		}
	}
	if len(bad) > 0 {
		return Fail("%s", strings.Join(append(bad, good...), "; "))
	}
	return Pass("every card registered for the monitor's events: %s", strings.Join(good, "; "))
}

// SettingsOutcome compares the cards' settings (compute and MIG mode, by
// UUID) at the end of a run with those at its start.
func SettingsOutcome(before, after map[string]string) Outcome {
	var changed []string
	for id, b := range before {
		if a := after[id]; a != b {
			changed = append(changed, fmt.Sprintf("%s: was %s, now %q", id, b, a))
		}
	}
	sort.Strings(changed)
	if len(changed) > 0 {
		return Fail("settings changed during the check: %s", strings.Join(changed, "; "))
	}
	return Pass("%d card(s) kept their compute mode and MIG mode", len(before))
}

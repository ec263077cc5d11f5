package usage

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

const gib = int64(1) << 30

func ptr(i int) *int { return &i }

// records: an MPS share and a share without a backend on GPU-1, a whole
// card and an admin-access claim on GPU-2, a MIG partition (GPU instance
// 1) on GPU-3.
func records() map[string]prepared.Claim {
	claim := func(uid string, dev prepared.Device) prepared.Claim {
		return prepared.Claim{UID: uid, Namespace: "team", Name: "claim-" + uid, State: prepared.PrepareCompleted, Devices: []prepared.Device{dev}}
	}
	return map[string]prepared.Claim{
		"a": claim("a", prepared.Device{Device: "gpu-1", GPUUUID: "GPU-1", ShareID: "s1", Share: true, MemoryBytes: 4 * gib, MPSPipeDir: "/run/tangram/mps/pipe"}),
		"b": claim("b", prepared.Device{Device: "gpu-1", GPUUUID: "GPU-1", ShareID: "s2", Share: true, MemoryBytes: 2 * gib}),
		"w": claim("w", prepared.Device{Device: "gpu-2", GPUUUID: "GPU-2", MemoryBytes: 80 * gib}),
		"x": claim("x", prepared.Device{Device: "gpu-2", GPUUUID: "GPU-2", AdminAccess: true}),
		"m": claim("m", prepared.Device{Device: "gpu-3-mig-9-4", GPUUUID: "GPU-3", MemoryBytes: 20 * gib,
			MIG: &prepared.MIG{ParentIndex: 3, ProfileID: 9, Profile: "3g.40gb", Start: 4, Size: 4, GPUInstanceID: ptr(1), ComputeInstanceID: ptr(0), UUID: "MIG-3"}}),
	}
}

// use is a Use as the tests compare it.
type use struct {
	claim string
	pids  []int
	used  int64
	known bool
	over  bool
}

func TestAttribute(t *testing.T) {
	claimsOf := map[string][]string{
		"pod-a": {"team/claim-a"}, "pod-b": {"team/claim-b"}, "pod-w": {"team/claim-w"}, "pod-x": {"team/claim-x"}, "pod-m": {"team/claim-m"},
		"pod-ab": {"team/claim-b", "team/claim-a"}, "pod-b2": {"team/claim-b"}, "pod-unprepared": {"team/claim-gone"},
		// The same name in another namespace is another claim.
		"pod-other": {"elsewhere/claim-a"},
	}
	tests := []struct {
		name        string
		procs       []gpu.Process
		podOf       map[int]string
		node        map[string]bool
		wantUses    []use
		wantStrays  []int
		wantNode    []int
		wantAmbig   []int
		wantStrayOf map[int]string
		// wantPods are the pods of some uses, by claim UID.
		wantPods map[string][]string
		// wantSM is the SM utilisation of some uses, by claim UID; -1 not known.
		wantSM map[string]int
	}{
		{name: "a share's processes summed",
			procs:    []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 11, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: 2 * gib}},
			podOf:    map[int]string{10: "pod-a", 11: "pod-a"},
			wantUses: []use{{claim: "a", pids: []int{10, 11}, used: 3 * gib, known: true}}},
		{name: "a share over its memory, MPS and without a backend",
			procs:    []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: 5 * gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 20, UsedBytes: 2*gib + 1}},
			podOf:    map[int]string{10: "pod-a", 20: "pod-b"},
			wantUses: []use{{claim: "a", pids: []int{10}, used: 5 * gib, known: true, over: true}, {claim: "b", pids: []int{20}, used: 2*gib + 1, known: true, over: true}}},
		{name: "memory NVML does not give: a lower bound, never over on it",
			procs:    []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: -1}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 12, UsedBytes: gib}},
			podOf:    map[int]string{10: "pod-a", 12: "pod-a"},
			wantUses: []use{{claim: "a", pids: []int{10, 12}, used: gib, known: false}}},
		{name: "a whole card is never over, admin access is accounted",
			procs:    []gpu.Process{{Card: "GPU-2", GPUInstance: gpu.NoGPUInstance, PID: 30, UsedBytes: 90 * gib}, {Card: "GPU-2", GPUInstance: gpu.NoGPUInstance, PID: 40, UsedBytes: gib}},
			podOf:    map[int]string{30: "pod-w", 40: "pod-x"},
			wantUses: []use{{claim: "w", pids: []int{30}, used: 90 * gib, known: true}, {claim: "x", pids: []int{40}, used: gib, known: true}}},
		{name: "a MIG partition: its own instance, not another's",
			procs:       []gpu.Process{{Card: "GPU-3", GPUInstance: 1, PID: 50, UsedBytes: 30 * gib}, {Card: "GPU-3", GPUInstance: 2, PID: 51, UsedBytes: gib}, {Card: "GPU-3", GPUInstance: gpu.NoGPUInstance, PID: 52, UsedBytes: gib}},
			podOf:       map[int]string{50: "pod-m", 51: "pod-m", 52: "pod-m"},
			wantUses:    []use{{claim: "m", pids: []int{50}, used: 30 * gib, known: true}},
			wantStrays:  []int{52, 51},
			wantStrayOf: map[int]string{51: "pod-m", 52: "pod-m"}},
		{name: "strays: a card the pod holds nothing of, no pod, a claim not prepared, another namespace's claim of the same name",
			procs:       []gpu.Process{{Card: "GPU-2", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 60, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 61, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 62, UsedBytes: gib}},
			podOf:       map[int]string{10: "pod-a", 60: "", 61: "pod-unprepared", 62: "pod-other"},
			wantStrays:  []int{60, 61, 62, 10},
			wantStrayOf: map[int]string{10: "pod-a", 60: "", 61: "pod-unprepared", 62: "pod-other"}},
		{name: "the node's daemon is the node's; a process gone before its cgroup was read is left out",
			procs:    []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 70, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 71, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 72}},
			podOf:    map[int]string{70: "pod-plugin", 72: "pod-mps-daemon"},
			node:     map[string]bool{"pod-plugin": true, "pod-mps-daemon": true},
			wantNode: []int{70, 72}},
		{name: "a pod with two shares of the card: the first claim, said to be ambiguous",
			procs:     []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 80, UsedBytes: gib}},
			podOf:     map[int]string{80: "pod-ab"},
			wantUses:  []use{{claim: "a", pids: []int{80}, used: gib, known: true}},
			wantAmbig: []int{80}},
		{name: "a pod with two shares of the card over the first's memory but within both's: not over",
			procs:     []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 81, UsedBytes: 5 * gib}},
			podOf:     map[int]string{81: "pod-ab"},
			wantUses:  []use{{claim: "a", pids: []int{81}, used: 5 * gib, known: true}},
			wantAmbig: []int{81}},
		{name: "a pod with two shares of the card over both's memory: over",
			procs:     []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 82, UsedBytes: 7 * gib}},
			podOf:     map[int]string{82: "pod-ab"},
			wantUses:  []use{{claim: "a", pids: []int{82}, used: 7 * gib, known: true, over: true}},
			wantAmbig: []int{82}},
		{name: "a share used by a pod holding two shares of the card and by one holding it alone: held to its own memory",
			procs:     []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 83, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 84, UsedBytes: 5 * gib}},
			podOf:     map[int]string{83: "pod-ab", 84: "pod-a"},
			wantUses:  []use{{claim: "a", pids: []int{83, 84}, used: 6 * gib, known: true, over: true}},
			wantAmbig: []int{83}},
		{name: "SM utilisation summed over a device's processes; not known when one's is not",
			procs: []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 10, UsedBytes: gib, SMPercent: 30, SMKnown: true},
				{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 11, UsedBytes: gib, SMPercent: 25, SMKnown: true},
				{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 20, UsedBytes: gib, SMPercent: 10, SMKnown: true},
				{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 21, UsedBytes: gib}},
			podOf:    map[int]string{10: "pod-a", 11: "pod-a", 20: "pod-b", 21: "pod-b"},
			wantUses: []use{{claim: "a", pids: []int{10, 11}, used: 2 * gib, known: true}, {claim: "b", pids: []int{20, 21}, used: 2 * gib, known: true}},
			wantSM:   map[string]int{"a": 55, "b": -1}},
		{name: "a claim shared by two pods, each with two processes: both pods, once each",
			procs: []gpu.Process{{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 90, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 91, UsedBytes: gib},
				{Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 92, UsedBytes: gib}, {Card: "GPU-1", GPUInstance: gpu.NoGPUInstance, PID: 93, UsedBytes: gib}},
			podOf:    map[int]string{90: "pod-b", 91: "pod-b2", 92: "pod-b", 93: "pod-b2"},
			wantUses: []use{{claim: "b", pids: []int{90, 91, 92, 93}, used: 4 * gib, known: true, over: true}},
			wantPods: map[string][]string{"b": {"pod-b", "pod-b2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := records()
			// A claim made again under the name of "a", its old record
			// still being undone: the pods run with the completed one.
			old := recs["a"]
			old.UID, old.State = "z-older", prepared.PrepareStarted
			old.Devices = []prepared.Device{{Device: "gpu-1", GPUUUID: "GPU-1", ShareID: "s0", Share: true, MemoryBytes: gib}}
			recs[old.UID] = old
			r := Attribute(Inputs{Processes: tt.procs, PodOf: tt.podOf, ClaimsOf: claimsOf, Records: recs, NodePods: tt.node})
			var uses []use
			for _, u := range r.Uses {
				if u.Namespace != "team" || u.Name != "claim-"+u.ClaimUID || u.Device.Device != records()[u.ClaimUID].Devices[0].Device {
					t.Errorf("use of %s names %s/%s, device %s", u.ClaimUID, u.Namespace, u.Name, u.Device.Device)
				}
				uses = append(uses, use{claim: u.ClaimUID, pids: u.PIDs, used: u.UsedBytes, known: u.UsedKnown, over: u.Over})
			}
			for _, u := range r.Uses {
				if want, ok := tt.wantPods[u.ClaimUID]; ok && !reflect.DeepEqual(u.Pods, want) {
					t.Errorf("pods of %s: %v, want %v", u.ClaimUID, u.Pods, want)
				}
				if want, ok := tt.wantSM[u.ClaimUID]; ok && (u.SMKnown != (want >= 0) || u.SMKnown && u.SMPercent != want) {
					t.Errorf("SM of %s: %d (known %t), want %d", u.ClaimUID, u.SMPercent, u.SMKnown, want)
				}
			}
			if fmt.Sprint(uses) != fmt.Sprint(tt.wantUses) {
				t.Errorf("uses %+v, want %+v", uses, tt.wantUses)
			}
			pidsOf := func(ps []gpu.Process) []int {
				var out []int
				for _, p := range ps {
					out = append(out, p.PID)
				}
				return out
			}
			var strays []int
			strayOf := map[int]string{}
			for _, s := range r.Strays {
				strays = append(strays, s.PID)
				strayOf[s.PID] = s.Pod
			}
			if !reflect.DeepEqual(strays, tt.wantStrays) {
				t.Errorf("strays %v, want %v", strays, tt.wantStrays)
			}
			if len(tt.wantStrayOf) > 0 && !reflect.DeepEqual(strayOf, tt.wantStrayOf) {
				t.Errorf("strays' pods %v, want %v", strayOf, tt.wantStrayOf)
			}
			if got := pidsOf(r.Node); !reflect.DeepEqual(got, tt.wantNode) {
				t.Errorf("node's processes %v, want %v", got, tt.wantNode)
			}
			if got := pidsOf(r.Ambiguous); !reflect.DeepEqual(got, tt.wantAmbig) {
				t.Errorf("ambiguous %v, want %v", got, tt.wantAmbig)
			}
		})
	}
}

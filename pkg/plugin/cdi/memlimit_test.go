package cdi

import (
	"reflect"
	"testing"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
)

func TestMemoryLimitHooks(t *testing.T) {
	hook := &MemoryLimitHook{Path: "/var/lib/tangram/bin/tangram-cdi-hook", DriverRoot: "/run/nvidia/driver", StateDir: "/var/lib/tangram/memory-limits"}
	withHook := func(r testResult) testResult { r.MemoryLimitHook = hook; return r }
	args := func(uuid, bytes string) []string {
		// The claim names the pod-level limit's record (pkg/plugin/memlimit).
		return []string{"tangram-cdi-hook", "--driver-root", "/run/nvidia/driver", "--state-dir", "/var/lib/tangram/memory-limits",
			"--claim", uid, "--limit", uuid + "=" + bytes}
	}
	strict := func(uuid, bytes string) []string {
		return []string{"tangram-cdi-hook", "--driver-root", "/run/nvidia/driver", "--state-dir", "/var/lib/tangram/memory-limits",
			"--claim", uid, "--non-root-class", "hard-shared-gpu.tangram.dev", "--claim-name", "ml/train", "--limit", uuid + "=" + bytes}
	}
	tests := []struct {
		name    string
		results []testResult
		// nonRootClass is the claim's strict class (prepared.Claim.NonRootClass).
		nonRootClass string
		want         [][][]string // per device: the args of each hook
	}{
		{
			name:    "20 GiB MPS share on a hard node",
			results: []testResult{withHook(share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "30", nil))},
			want:    [][][]string{{args(uuid0, "21474836480")}},
		},
		{
			// Every container that joins the claim is checked, not only
			// the pods reserving it at prepare.
			name:         "share of a strict class: the hook also refuses root containers",
			results:      []testResult{withHook(share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "30", nil))},
			nonRootClass: "hard-shared-gpu.tangram.dev",
			want:         [][][]string{{strict(uuid0, "21474836480")}},
		},
		{
			name: "strict shares of two cards: both hooks check",
			results: []testResult{
				withHook(share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "", nil)),
				withHook(share("gpu-1", testGPU(1, uuid1), share2, "8Gi", "", nil)),
			},
			nonRootClass: "hard-shared-gpu.tangram.dev",
			want:         [][][]string{{strict(uuid0, "21474836480")}, {strict(uuid1, "8589934592")}},
		},
		{
			name:    "time-sliced share is limited too",
			results: []testResult{withHook(share("gpu-0", testGPU(0, uuid0), share1, "10Gi", "", cfgWith(v1alpha1.BackendNone, 0)))},
			want:    [][][]string{{args(uuid0, "10737418240")}},
		},
		{
			name: "two shares of one card in a claim: the claim's sum on both devices",
			results: []testResult{
				withHook(share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "", nil)),
				withHook(share("gpu-0", testGPU(0, uuid0), share2, "4Gi", "", nil)),
			},
			want: [][][]string{{args(uuid0, "25769803776")}, {args(uuid0, "25769803776")}},
		},
		{
			name: "shares of two cards: each device limits its own card",
			results: []testResult{
				withHook(share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "", nil)),
				withHook(share("gpu-1", testGPU(1, uuid1), share2, "8Gi", "", nil)),
			},
			want: [][][]string{{args(uuid0, "21474836480")}, {args(uuid1, "8589934592")}},
		},
		{
			name:    "whole card: no limit",
			results: []testResult{withHook(whole("gpu-0", testGPU(0, uuid0)))},
			want:    [][][]string{nil},
		},
		{
			name: "no state directory: no claim record",
			results: []testResult{func() testResult {
				r := share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "", nil)
				r.MemoryLimitHook = &MemoryLimitHook{Path: hook.Path, DriverRoot: "/run/nvidia/driver"}
				return r
			}()},
			want: [][][]string{{{"tangram-cdi-hook", "--driver-root", "/run/nvidia/driver", "--limit", uuid0 + "=21474836480"}}},
		},
		{
			name:    "no hook configured (advisory or compute-only node)",
			results: []testResult{share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "", nil)},
			want:    [][][]string{nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claim := testClaim
			claim.NonRootClass = tt.nonRootClass
			edits, err := run(claim, tt.results)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := build(edits, claim, tt.results, NoHardware{})
			if err != nil {
				t.Fatal(err)
			}
			var got [][][]string
			for _, d := range spec.Devices {
				var hooks [][]string
				for _, h := range d.ContainerEdits.Hooks {
					if h.HookName != "createRuntime" || h.Path != hook.Path {
						t.Errorf("%s: hook %s %s, want createRuntime %s", d.Name, h.HookName, h.Path, hook.Path)
					}
					// A hung hook must not hold the container (nor the
					// node's records lock) for ever: the runtime kills it.
					if h.Timeout == nil || *h.Timeout != MemoryLimitHookTimeout {
						t.Errorf("%s: hook timeout %v, want %d s", d.Name, h.Timeout, MemoryLimitHookTimeout)
					}
					hooks = append(hooks, h.Args)
				}
				got = append(got, hooks)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("hooks per device:\n%q\nwant:\n%q", got, tt.want)
			}
		})
	}
}

package cdi

import (
	"context"
	"reflect"
	"testing"
	"time"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/memlimit/records"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// TestClaimSpecsMemoryLimitHook: on a hard-enforcement node the written spec
// of a share runs tangram-cdi-hook with the card and the share's bytes;
// without the hook configured it does not.
func TestClaimSpecsMemoryLimitHook(t *testing.T) {
	hook := &MemoryLimitHook{Path: "/var/lib/tangram/bin/tangram-cdi-hook", DriverRoot: "/", StateDir: "/var/lib/tangram/memory-limits"}
	card := gpu.GPU{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", MemoryBytes: 80 << 30}
	cfg := &configapi.GpuConfig{Sharing: &configapi.Sharing{Backend: configapi.BackendNone}}
	cfg.Normalize()
	claim := prepared.Claim{UID: "0b5e5a43-6b8e-4c16-9c7a-3d1d2b6f1a00", Namespace: "ml", Name: "train", Devices: []prepared.Device{{
		Request: "shared", Device: "gpu-0", GPUUUID: card.UUID, ShareID: "5f1c9a62-3a0f-4f7e-8f1d-9f1b2a3c4d5e", Share: true,
		MemoryBytes: 20 << 30, Config: cfg,
	}}}
	for _, tt := range []struct {
		name string
		hook *MemoryLimitHook
		want [][]string
	}{
		{"hard node", hook, [][]string{{"tangram-cdi-hook", "--driver-root", "/", "--state-dir", "/var/lib/tangram/memory-limits",
			"--claim", string(claim.UID), "--limit", card.UUID + "=21474836480"}}},
		{"advisory node", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := NewSpecStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			specs := ClaimSpecs{Store: store, Hardware: NoHardware{}, Cards: map[string]gpu.GPU{"gpu-0": card}, MemoryLimitHook: tt.hook}
			if _, err := specs.Write(context.Background(), claim); err != nil {
				t.Fatal(err)
			}
			written, err := store.Read(claim.UID)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, d := range written.Devices {
				for _, h := range d.ContainerEdits.Hooks {
					got = append(got, h.Args)
					// The written spec carries the OCI timeout: the runtime
					// kills a hung hook instead of waiting on it for ever.
					if h.Timeout == nil || *h.Timeout != MemoryLimitHookTimeout {
						t.Errorf("hook timeout in the written spec %v, want %d s", h.Timeout, MemoryLimitHookTimeout)
					}
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("hooks in the written spec %q, want %q", got, tt.want)
			}
		})
	}
}

// TestClaimSpecsRemoveDropsTheMemoryLimitRecord: unprepare forgets which pod
// held the claim, with its spec.
func TestClaimSpecsRemoveDropsTheMemoryLimitRecord(t *testing.T) {
	store, err := NewSpecStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	recs := records.Dir{Path: t.TempDir()}
	const uid = "0b5e5a43-6b8e-4c16-9c7a-3d1d2b6f1a00"
	unlock, err := recs.Lock(time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := recs.Save(uid, records.Claim{PodCgroup: "/sys/fs/cgroup/kubepods/pod1", PodUID: "1", Limits: map[string]uint64{"GPU-x": 1}}); err != nil {
		t.Fatal(err)
	}
	specs := ClaimSpecs{Store: store, MemoryLimitHook: &MemoryLimitHook{StateDir: recs.Path}}
	if err := specs.Remove(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	rec, err := recs.Load(uid)
	if err != nil || rec.PodCgroup != "" {
		t.Errorf("record after Remove: %+v, %v; want none", rec, err)
	}
}

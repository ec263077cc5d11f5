package cdi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// mountsOf renders a device's mounts as "host:container:options".
func mountsOf(d cdispec.Device) []string {
	var out []string
	for _, m := range d.ContainerEdits.Mounts {
		out = append(out, m.HostPath+":"+m.ContainerPath+":"+strings.Join(m.Options, ","))
	}
	slices.Sort(out)
	return out
}

// TestClaimSpecsShmAndPipeMounts: every device of a claim's cards mounts
// one /dev/shm, the claim's own directory (whole cards, shares without
// MPS, MPS shares of both kinds: a classic client works with a /dev/shm of
// its own, docs/gpu-reports/2026-11-27-h200-r580-experiments.md, so the
// manager's client configuration names the claim's); the classic daemon's pipe
// directory, shared by every share of the node, is mounted read-only, a v3
// namespace's (the claim's own) read-write. The claim-wide device mounts
// nothing. Two claims get different directories.
func TestClaimSpecsShmAndPipeMounts(t *testing.T) {
	cards := map[string]gpu.GPU{
		"gpu-0": {Index: 0, UUID: "GPU-0", MemoryBytes: 80 << 30},
		"gpu-1": {Index: 1, UUID: "GPU-1", MemoryBytes: 80 << 30},
	}
	mpsCfg := &configapi.GpuConfig{Sharing: &configapi.Sharing{Backend: configapi.BackendMPS}}
	mpsCfg.Normalize()
	noneCfg := &configapi.GpuConfig{Sharing: &configapi.Sharing{Backend: configapi.BackendNone}}
	noneCfg.Normalize()
	wholeDev := func(req, dev string) prepared.Device {
		return prepared.Device{Request: req, Device: dev, GPUUUID: cards[dev].UUID}
	}
	shareDev := func(req, dev, id string, cfg *configapi.GpuConfig) prepared.Device {
		return prepared.Device{Request: req, Device: dev, GPUUUID: cards[dev].UUID, ShareID: id, Share: true, MemoryBytes: 20 << 30,
			Config: cfg, MPSPipeDir: "/mps/pipe"}
	}
	ownShm := func(uid string) string { return "/mps/claims/" + uid + "/shm" }
	shm := func(dir string) string { return dir + ":/dev/shm:rbind,rw,nosuid,nodev,noexec" }
	classic := func(uid string) mps.ClientConfig {
		return mps.ClientConfig{PipeDir: "/mps/pipe", PipeReadOnly: true, Mounts: []mps.Mount{
			{HostPath: "/mps/pipe", ContainerPath: "/mps/pipe", ReadOnly: true},
			{HostPath: ownShm(uid), ContainerPath: "/dev/shm"},
		}}
	}
	v3 := func(uid string) mps.ClientConfig {
		pipe := "/mps/pipe/tangram/tangram_" + uid
		return mps.ClientConfig{PipeDir: pipe, Mounts: []mps.Mount{
			{HostPath: pipe, ContainerPath: pipe}, {HostPath: ownShm(uid), ContainerPath: "/dev/shm"},
		}}
	}
	for _, tt := range []struct {
		name    string
		uid     string
		devices []prepared.Device
		client  mps.ClientConfig
		noDirs  bool
		// want is each device's mounts, by CDI device name suffix.
		want map[string][]string
	}{
		{name: "whole card: the claim's own /dev/shm", uid: "a", devices: []prepared.Device{wholeDev("gpu", "gpu-0")},
			want: map[string][]string{"a-gpu-0": {shm(ownShm("a"))}}},
		{name: "another claim: another directory", uid: "b", devices: []prepared.Device{wholeDev("gpu", "gpu-1")},
			want: map[string][]string{"b-gpu-1": {shm(ownShm("b"))}}},
		{name: "two requests: both devices mount the one directory, the claim-wide device none", uid: "c",
			devices: []prepared.Device{wholeDev("x", "gpu-0"), wholeDev("y", "gpu-1")},
			want:    map[string][]string{"c-gpu-0": {shm(ownShm("c"))}, "c-gpu-1": {shm(ownShm("c"))}, "c-claim": nil}},
		{name: "share without MPS: the claim's own /dev/shm", uid: "d", devices: []prepared.Device{shareDev("gpu", "gpu-0", "s1", noneCfg)},
			want: map[string][]string{"d-gpu-0-s1": {shm(ownShm("d"))}}},
		{name: "classic MPS share: the claim's own /dev/shm, the daemon's pipe directory read-only", uid: "e",
			devices: []prepared.Device{shareDev("gpu", "gpu-0", "s1", mpsCfg)}, client: classic("e"),
			want: map[string][]string{"e-gpu-0-s1": {"/mps/pipe:/mps/pipe:rbind,ro,nosuid,nodev", shm(ownShm("e"))}}},
		{name: "classic MPS share beside a whole card in one claim: one /dev/shm for the claim, its own", uid: "f",
			devices: []prepared.Device{wholeDev("big", "gpu-1"), shareDev("small", "gpu-0", "s1", mpsCfg)}, client: classic("f"),
			want: map[string][]string{"f-gpu-1": {shm(ownShm("f"))}, "f-gpu-0-s1": {"/mps/pipe:/mps/pipe:rbind,ro,nosuid,nodev", shm(ownShm("f"))}, "f-claim": nil}},
		{name: "MPS v3 share: its namespace's pipe directory read-write, the claim's own /dev/shm", uid: "g",
			devices: []prepared.Device{shareDev("gpu", "gpu-0", "s1", mpsCfg)}, client: v3("g"),
			want: map[string][]string{"g-gpu-0-s1": {"/mps/pipe/tangram/tangram_g:/mps/pipe/tangram/tangram_g:rbind,rw,nosuid,nodev", shm(ownShm("g"))}}},
		{name: "no claim directories configured: the runtime's /dev/shm", uid: "h", devices: []prepared.Device{wholeDev("gpu", "gpu-0")},
			noDirs: true, want: map[string][]string{"h-gpu-0": nil}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store, err := NewSpecStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			specs := ClaimSpecs{Store: store, Hardware: NoHardware{}, Cards: cards, ClaimShmDir: ownShm, MPS: fixedClient(tt.client)}
			if tt.noDirs {
				specs.ClaimShmDir = nil
			}
			claim := prepared.Claim{UID: tt.uid, Namespace: "ns", Name: "claim-" + tt.uid, Devices: tt.devices}
			if _, err := specs.Write(context.Background(), claim); err != nil {
				t.Fatal(err)
			}
			written, err := store.Read(tt.uid)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, d := range written.Devices {
				got[d.Name] = mountsOf(d)
			}
			for name, want := range tt.want {
				slices.Sort(want)
				have, ok := got[name]
				if !ok {
					t.Errorf("no device %s in the spec (devices %v)", name, fmt.Sprint(got))
					continue
				}
				if !slices.Equal(have, want) {
					t.Errorf("device %s mounts %q, want %q", name, have, want)
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("devices %v, want %d", got, len(tt.want))
			}
		})
	}
}

// fixedClient gives every claim the same MPS client configuration.
type fixedClient mps.ClientConfig

func (f fixedClient) ClientConfig(string) mps.ClientConfig { return mps.ClientConfig(f) }

package cdi

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

const (
	uid    = "0b5e5a43-6b8e-4c16-9c7a-3d1d2b6f1a00"
	share1 = "5f1c9a62-3a0f-4f7e-8f1d-9f1b2a3c4d5e"
	share2 = "7a2b8c93-1d4e-4b5f-a6c7-d8e9f0a1b2c3"
	uuid0  = "GPU-00000000-0000-0000-0000-000000000000"
	uuid1  = "GPU-11111111-1111-1111-1111-111111111111"
	pipe   = "/run/tangram/mps/claim-x/pipe"
	gib80  = int64(80) << 30
)

var testClaim = prepared.Claim{UID: uid, Namespace: "ml", Name: "train"}

func testGPU(index int, uuid string) gpu.GPU {
	return gpu.GPU{Index: index, Minor: index, UUID: uuid, MemoryBytes: gib80}
}

// testResult is how these tests write one device of a claim: its record,
// the card it names, and the per-claim inputs (pipe directory, hook) that
// the tests set on the device that needs them; run and build merge them
// into the claim's Inputs.
type testResult struct {
	prepared.Device
	GPU             gpu.GPU
	MPSPipeDir      string
	MemoryLimitHook *MemoryLimitHook
}

func whole(device string, g gpu.GPU) testResult {
	return testResult{Device: prepared.Device{Request: "gpu", Device: device, GPUUUID: g.UUID, MemoryBytes: g.MemoryBytes}, GPU: g}
}

// share is a result that consumed memory (and compute) of a card; as the
// plan decides, it is a share unless it consumed the card's whole memory.
func share(device string, g gpu.GPU, shareID, memory, compute string, cfg *v1alpha1.GpuConfig) testResult {
	q := resource.MustParse(memory)
	mem := q.Value()
	var pct int64
	if compute != "" {
		c := resource.MustParse(compute)
		pct = c.Value()
	}
	return testResult{Device: prepared.Device{Request: "shared", Device: device, GPUUUID: g.UUID, ShareID: shareID,
		Share: mem < g.MemoryBytes || g.MemoryBytes == 0, MemoryBytes: mem, ComputePercent: pct, Config: cfg}, GPU: g, MPSPipeDir: pipe}
}

// claimOf is the claim record and inputs of the results.
func claimOf(claim prepared.Claim, results []testResult) (prepared.Claim, Inputs) {
	in := Inputs{Cards: map[string]gpu.GPU{}}
	for _, r := range results {
		claim.Devices = append(claim.Devices, r.Device)
		if _, ok := in.Cards[r.Device.Device]; !ok {
			in.Cards[r.Device.Device] = r.GPU
		}
		if in.MPSPipeDir == "" {
			in.MPSPipeDir = r.MPSPipeDir
		}
		if in.MemoryLimitHook == nil {
			in.MemoryLimitHook = r.MemoryLimitHook
		}
	}
	return claim, in
}

func run(claim prepared.Claim, results []testResult) (*ClaimEdits, error) {
	c, in := claimOf(claim, results)
	return ComputeClaimEdits(c, in)
}

func build(edits *ClaimEdits, claim prepared.Claim, results []testResult, hw HardwareEdits) (*cdispec.Spec, error) {
	c, in := claimOf(claim, results)
	return BuildSpec(edits, c, in.Cards, hw)
}

func cfgWith(backend v1alpha1.SharingBackend, defaultPct int32) *v1alpha1.GpuConfig {
	c := &v1alpha1.GpuConfig{Sharing: &v1alpha1.Sharing{Backend: backend}}
	if defaultPct > 0 {
		c.Sharing.MPS = &v1alpha1.MPSSettings{DefaultActiveThreadPercentage: &defaultPct}
	}
	c.Normalize()
	return c
}

func claimEnv(extra ...string) []string {
	return append([]string{
		"TANGRAM_CLAIM=ml/train",
		"TANGRAM_CLAIM_UID=" + uid,
	}, extra...)
}

func TestComputeClaimEdits(t *testing.T) {
	pipeMount := []*cdispec.Mount{{HostPath: pipe, ContainerPath: pipe, Options: []string{"rbind", "rw", "nosuid", "nodev"}}}
	tests := []struct {
		name       string
		results    []testResult
		wantNames  []string
		wantEnv    []string
		wantMounts []*cdispec.Mount
		wantMPS    bool
	}{
		{
			name:      "whole card: no MPS variables",
			results:   []testResult{whole("gpu-0", testGPU(0, uuid0))},
			wantNames: []string{uid + "-gpu-0"},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid0}, claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-0", "TANGRAM_GPU_UUIDS="+uuid0, "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920",
				"TANGRAM_GPU_COMPUTE_PERCENT=100", "TANGRAM_SHARING_BACKEND=exclusive")...),
		},
		{
			name:      "share of a shareable card that consumed all memory is a whole card",
			results:   []testResult{share("gpu-0", testGPU(0, uuid0), share1, "80Gi", "0", nil)},
			wantNames: []string{uid + "-gpu-0-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid0}, claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-0", "TANGRAM_GPU_UUIDS="+uuid0, "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920",
				"TANGRAM_GPU_COMPUTE_PERCENT=100", "TANGRAM_SHARING_BACKEND=exclusive")...),
		},
		{
			name:      "share without compute: memory limit, no thread cap",
			results:   []testResult{share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "0", nil)},
			wantNames: []string{uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=20480",
				"TANGRAM_GPU_COMPUTE_PERCENT=100", "TANGRAM_SHARING_BACKEND=mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=20480M")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			// Admin access sees the card; it must not lift the limits of the
			// claim's share of that same card.
			name: "admin access next to a share of the same card keeps the share's limits",
			results: []testResult{
				func() testResult {
					r := share("gpu-1", testGPU(1, uuid1), share2, "80Gi", "", nil)
					r.Request, r.AdminAccess = "monitor", true
					return r
				}(),
				share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "", nil),
			},
			wantNames: []string{uid + "-gpu-1-" + share2, uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=20480",
				"TANGRAM_GPU_COMPUTE_PERCENT=100", "TANGRAM_SHARING_BACKEND=mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=20480M")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			name: "admin access alone sees the whole card",
			results: []testResult{func() testResult {
				r := share("gpu-1", testGPU(1, uuid1), share2, "20Gi", "", nil)
				r.AdminAccess = true
				return r
			}()},
			wantNames: []string{uid + "-gpu-1-" + share2},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920",
				"TANGRAM_GPU_COMPUTE_PERCENT=100", "TANGRAM_SHARING_BACKEND=exclusive")...),
		},
		{
			name:      "share with compute",
			results:   []testResult{share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "40", cfgWith(v1alpha1.BackendMPS, 0))},
			wantNames: []string{uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=20480",
				"TANGRAM_GPU_COMPUTE_PERCENT=40", "TANGRAM_SHARING_BACKEND=mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=20480M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			name:      "share without compute gets the config's default cap",
			results:   []testResult{share("gpu-1", testGPU(1, uuid1), share1, "7680Mi", "", cfgWith(v1alpha1.BackendMPS, 25))},
			wantNames: []string{uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=7680",
				"TANGRAM_GPU_COMPUTE_PERCENT=25", "TANGRAM_SHARING_BACKEND=mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=7680M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			name:      "requested compute beats the default cap",
			results:   []testResult{share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "60", cfgWith(v1alpha1.BackendMPS, 25))},
			wantNames: []string{uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=10240",
				"TANGRAM_GPU_COMPUTE_PERCENT=60", "TANGRAM_SHARING_BACKEND=mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=10240M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=60")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			name:      "backend none: accounting only, no MPS",
			results:   []testResult{share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "40", cfgWith(v1alpha1.BackendNone, 0))},
			wantNames: []string{uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=20480",
				"TANGRAM_GPU_COMPUTE_PERCENT=40", "TANGRAM_SHARING_BACKEND=none")...),
		},
		{
			name:      "two whole cards",
			results:   []testResult{whole("gpu-0", testGPU(0, uuid0)), whole("gpu-1", testGPU(1, uuid1))},
			wantNames: []string{uid + "-gpu-0", uid + "-gpu-1"},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid0 + "," + uuid1}, claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-0,gpu-1", "TANGRAM_GPU_UUIDS="+uuid0+","+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920,81920",
				"TANGRAM_GPU_COMPUTE_PERCENT=100,100", "TANGRAM_SHARING_BACKEND=exclusive,exclusive")...),
		},
		{
			name: "shares on two cards: one limit list, the smallest thread cap",
			results: []testResult{
				share("gpu-0", testGPU(0, uuid0), share1, "10Gi", "30", nil),
				share("gpu-1", testGPU(1, uuid1), share2, "20Gi", "50", nil),
			},
			wantNames: []string{uid + "-gpu-0-" + share1, uid + "-gpu-1-" + share2},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid0 + "," + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-0,gpu-1", "TANGRAM_GPU_UUIDS="+uuid0+","+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=10240,20480",
				"TANGRAM_GPU_COMPUTE_PERCENT=30,50", "TANGRAM_SHARING_BACKEND=mps,mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid0+"=10240M,"+uuid1+"=20480M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			name: "two shares of one card add up",
			results: []testResult{
				share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "20", nil),
				share("gpu-1", testGPU(1, uuid1), share2, "5Gi", "10", nil),
			},
			wantNames: []string{uid + "-gpu-1-" + share1, uid + "-gpu-1-" + share2},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-1", "TANGRAM_GPU_UUIDS="+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=15360",
				"TANGRAM_GPU_COMPUTE_PERCENT=30", "TANGRAM_SHARING_BACKEND=mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=15360M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
		{
			name: "a whole card and a share of the same card: the card stays whole",
			results: []testResult{
				share("gpu-0", testGPU(0, uuid0), share1, "20Gi", "50", nil),
				whole("gpu-0", testGPU(0, uuid0)),
			},
			wantNames: []string{uid + "-gpu-0-" + share1, uid + "-gpu-0"},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid0}, claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-0", "TANGRAM_GPU_UUIDS="+uuid0, "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920",
				"TANGRAM_GPU_COMPUTE_PERCENT=100", "TANGRAM_SHARING_BACKEND=exclusive")...),
		},
		{
			name: "mixed whole card and share",
			results: []testResult{
				whole("gpu-0", testGPU(0, uuid0)),
				share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "", nil),
			},
			wantNames: []string{uid + "-gpu-0", uid + "-gpu-1-" + share1},
			wantEnv: append([]string{"NVIDIA_VISIBLE_DEVICES=" + uuid0 + "," + uuid1}, append(claimEnv(
				"TANGRAM_GPU_DEVICES=gpu-0,gpu-1", "TANGRAM_GPU_UUIDS="+uuid0+","+uuid1, "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920,20480",
				"TANGRAM_GPU_COMPUTE_PERCENT=100,100", "TANGRAM_SHARING_BACKEND=exclusive,mps"),
				"CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+uuid1+"=20480M")...),
			wantMounts: pipeMount,
			wantMPS:    true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := run(testClaim, tc.results)
			if err != nil {
				t.Fatalf("ComputeClaimEdits: %v", err)
			}
			if got.MPS != tc.wantMPS {
				t.Errorf("MPS = %v, want %v", got.MPS, tc.wantMPS)
			}
			var gotNames []string
			for _, d := range got.Devices {
				gotNames = append(gotNames, d.Name)
				if want := "k8s.gpu.tangram.dev/claim=" + d.Name; d.ID != want {
					t.Errorf("ID = %q, want %q", d.ID, want)
				}
			}
			// What a container naming the whole claim gets.
			env, mounts := wholeClaimView(got)
			if !reflect.DeepEqual(withoutCardEnv(env), tc.wantEnv) {
				t.Errorf("env\n got: %q\nwant: %q", env, tc.wantEnv)
			}
			if !reflect.DeepEqual(mounts, tc.wantMounts) {
				t.Errorf("mounts = %+v, want %+v", mounts, tc.wantMounts)
			}
			if !reflect.DeepEqual(gotNames, tc.wantNames) {
				t.Errorf("device names = %q, want %q", gotNames, tc.wantNames)
			}
		})
	}
}

// wholeClaimView merges the edits of every device of the claim, the
// claim-wide one last, as the runtime does for a container that names the
// claim without a request: variables by key, the last device winning, and
// mounts by container path.
func wholeClaimView(e *ClaimEdits) ([]string, []*cdispec.Mount) {
	devices := e.Devices
	if e.ClaimWide != nil {
		devices = append(slices.Clone(devices), *e.ClaimWide)
	}
	var env []string
	var mounts []*cdispec.Mount
	for _, d := range devices {
		for _, kv := range d.Edits.Env {
			key, _, _ := strings.Cut(kv, "=")
			if i := slices.IndexFunc(env, func(have string) bool { return strings.HasPrefix(have, key+"=") }); i >= 0 {
				env[i] = kv
			} else {
				env = append(env, kv)
			}
		}
		for _, m := range d.Edits.Mounts {
			if !slices.ContainsFunc(mounts, func(have *cdispec.Mount) bool { return have.ContainerPath == m.ContainerPath }) {
				mounts = append(mounts, m)
			}
		}
	}
	return env, mounts
}

// withoutCardEnv drops the per-card variables TANGRAM_GPU_<index>_*.
func withoutCardEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		rest, ok := strings.CutPrefix(kv, EnvGPUPrefix)
		if ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func TestComputeClaimEditsErrors(t *testing.T) {
	noPipe := share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "", nil)
	noPipe.MPSPipeDir = ""
	noUUID := whole("gpu-0", gpu.GPU{Index: 0})
	tests := []struct {
		name    string
		claim   prepared.Claim
		results []testResult
		wantErr string
	}{
		{
			name:    "no UID",
			claim:   prepared.Claim{Namespace: "ml", Name: "train"},
			results: []testResult{whole("gpu-0", testGPU(0, uuid0))},
			wantErr: "computing CDI edits: claim ml/train has no UID",
		},
		{
			name:    "no results",
			claim:   testClaim,
			wantErr: "computing CDI edits for claim ml/train: no device results",
		},
		{
			name:    "card without UUID",
			claim:   testClaim,
			results: []testResult{noUUID},
			wantErr: `computing CDI edits for claim ml/train: device gpu-0 (request "gpu") has no GPU UUID`,
		},
		{
			name:    "MPS share without pipe directory",
			claim:   testClaim,
			results: []testResult{noPipe},
			wantErr: `computing CDI edits for claim ml/train: share of device gpu-1 (request "shared") uses MPS but no MPS pipe directory was given`,
		},
		{
			name:  "two backends on one card",
			claim: testClaim,
			results: []testResult{
				share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "", cfgWith(v1alpha1.BackendMPS, 0)),
				share("gpu-1", testGPU(1, uuid1), share2, "10Gi", "", cfgWith(v1alpha1.BackendNone, 0)),
			},
			wantErr: `computing CDI edits for claim ml/train: device gpu-1 has shares with sharing backends "mps" and "none" in one claim; use one backend for all requests that share a card`,
		},
		{
			name:    "compute above 100",
			claim:   testClaim,
			results: []testResult{share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "150", nil)},
			wantErr: `computing CDI edits for claim ml/train: share of device gpu-1 (request "shared") consumed compute 150; expected a percentage 0..100`,
		},
		{
			name:    "memory below 1Mi",
			claim:   testClaim,
			results: []testResult{share("gpu-1", testGPU(1, uuid1), share1, "1Ki", "", nil)},
			wantErr: `computing CDI edits for claim ml/train: share of device gpu-1 (request "shared") consumed 1024 bytes of memory; a share needs at least 1Mi`,
		},
		{
			name:    "same share twice",
			claim:   testClaim,
			results: []testResult{share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "", nil), share("gpu-1", testGPU(1, uuid1), share1, "10Gi", "", nil)},
			wantErr: `computing CDI edits for claim ml/train: device gpu-1 share "` + share1 + `" appears twice in the allocation`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(tc.claim, tc.results)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error\n got: %v\nwant: %s", err, tc.wantErr)
			}
		})
	}
}

func TestComputeClaimEditsRefusesACardNotOfTheNode(t *testing.T) {
	claim, _ := claimOf(testClaim, []testResult{whole("gpu-9", testGPU(9, uuid0))})
	_, err := ComputeClaimEdits(claim, Inputs{Cards: map[string]gpu.GPU{"gpu-0": testGPU(0, uuid0)}})
	want := `computing CDI edits for claim ml/train: device gpu-9 (request "gpu") is not a card of this node`
	if err == nil || err.Error() != want {
		t.Fatalf("error\n got: %v\nwant: %s", err, want)
	}
}

// The edits of one device must not alias another's: callers may append.
func TestDevicesDoNotShareSlices(t *testing.T) {
	got, err := run(testClaim, []testResult{
		share("gpu-0", testGPU(0, uuid0), share1, "10Gi", "", nil),
		share("gpu-1", testGPU(1, uuid1), share2, "10Gi", "", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	got.Devices[0].Edits.Env[0] = "CHANGED=1"
	got.Devices[0].Edits.Mounts[0].HostPath = "/changed"
	if strings.HasPrefix(got.Devices[1].Edits.Env[0], "CHANGED") || got.Devices[1].Edits.Mounts[0].HostPath == "/changed" {
		t.Error("devices share env or mount storage")
	}
}

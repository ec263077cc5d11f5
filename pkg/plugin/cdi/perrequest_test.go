package cdi

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// kubeletDevice is what the plugin hands the kubelet for one result: the
// requests it belongs to and its CDI device IDs.
type kubeletDevice struct {
	requests []string
	ids      []string
}

// injectedIDs mirrors the kubelet (pkg/kubelet/cm/dra, 1.37): for every
// request a container names, in the container's order, the CDI IDs of the
// devices of that request in the plugin's order; naming no request ("")
// gives every device.
func injectedIDs(devices []kubeletDevice, named []string) []string {
	var out []string
	for _, request := range named {
		for _, d := range devices {
			if request == "" || slices.Contains(d.requests, request) {
				out = append(out, d.ids...)
			}
		}
	}
	return out
}

// A claim with two requests, "left" (a whole gpu-0) and "right" (an MPS
// share of gpu-1): whatever set of requests a container names, the CDI
// library, which containerd uses, injects into it exactly the cards of
// those requests, in its device nodes and its variables.
func TestPerRequestView(t *testing.T) {
	left := whole("gpu-0", testGPU(0, uuid0))
	left.Request = "left"
	right := share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "40", cfgWith(v1alpha1.BackendMPS, 0))
	right.Request = "right"
	results := []testResult{left, right}

	dir := t.TempDir()
	store, err := NewSpecStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	edits, err := run(testClaim, results)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := build(edits, testClaim, results, fakeHardware{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Write(uid, spec); err != nil {
		t.Fatal(err)
	}
	if edits.ClaimWide == nil {
		t.Fatal("a claim of two requests has no claim-wide device")
	}
	// The plugin's order: one device per result, the claim-wide one last.
	devices := []kubeletDevice{
		{requests: []string{"left"}, ids: []string{edits.Devices[0].ID}},
		{requests: []string{"right"}, ids: []string{edits.Devices[1].ID}},
		{requests: []string{prepared.ClaimWideRequest}, ids: []string{edits.ClaimWide.ID}},
	}

	mpsEnv := []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + uuid1 + "=20480M", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40"}
	leftEnv := []string{"TANGRAM_GPU_0_UUID=" + uuid0, "TANGRAM_GPU_0_SHARING_BACKEND=exclusive", "TANGRAM_GPU_0_MEMORY_LIMIT_MIB=81920"}
	rightEnv := []string{"TANGRAM_GPU_1_UUID=" + uuid1, "TANGRAM_GPU_1_SHARING_BACKEND=mps", "TANGRAM_GPU_1_MEMORY_LIMIT_MIB=20480", "TANGRAM_GPU_1_COMPUTE_PERCENT=40"}
	tests := []struct {
		name  string
		named []string
		// wantVisible is NVIDIA_VISIBLE_DEVICES; wantNodes the card nodes.
		wantVisible string
		wantNodes   []string
		wantEnv     []string
		// notEnv are variable names that must be absent.
		notEnv []string
	}{
		{
			name: "left only", named: []string{"left"},
			wantVisible: uuid0, wantNodes: []string{"/dev/nvidia0"},
			wantEnv: append(slices.Clone(leftEnv), "TANGRAM_SHARING_BACKEND=exclusive", "TANGRAM_GPU_MEMORY_LIMIT_MIB=81920"),
			notEnv:  []string{"TANGRAM_GPU_1_UUID", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"},
		},
		{
			name: "right only", named: []string{"right"},
			wantVisible: uuid1, wantNodes: []string{"/dev/nvidia1"},
			wantEnv: append(append(slices.Clone(rightEnv), mpsEnv...), "TANGRAM_SHARING_BACKEND=mps", "TANGRAM_GPU_COMPUTE_PERCENT=40"),
			notEnv:  []string{"TANGRAM_GPU_0_UUID"},
		},
		{
			name: "the whole claim", named: []string{""},
			wantVisible: uuid0 + "," + uuid1, wantNodes: []string{"/dev/nvidia0", "/dev/nvidia1"},
			wantEnv: append(append(append(slices.Clone(leftEnv), rightEnv...), mpsEnv...),
				"TANGRAM_SHARING_BACKEND=exclusive,mps", "TANGRAM_GPU_UUIDS="+uuid0+","+uuid1, "TANGRAM_GPU_DEVICES=gpu-0,gpu-1"),
		},
		{
			// The lists can hold one request's cards only (last device
			// wins); the per-card variables and device nodes hold both.
			name: "both requests by name", named: []string{"right", "left"},
			wantVisible: uuid0, wantNodes: []string{"/dev/nvidia0", "/dev/nvidia1"},
			wantEnv: append(append(slices.Clone(leftEnv), rightEnv...), mpsEnv...),
		},
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ociSpec := &oci.Spec{Process: &oci.Process{}}
			ids := injectedIDs(devices, tc.named)
			if unresolved, err := cache.InjectDevices(ociSpec, ids...); err != nil {
				t.Fatalf("InjectDevices(%v): unresolved %v: %v", ids, unresolved, err)
			}
			env := map[string]string{}
			for _, kv := range ociSpec.Process.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if got := env[EnvVisibleDevices]; got != tc.wantVisible {
				t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %q", got, tc.wantVisible)
			}
			for _, want := range tc.wantEnv {
				k, v, _ := strings.Cut(want, "=")
				if got, ok := env[k]; !ok || got != v {
					t.Errorf("%s = %q (set: %v), want %q", k, got, ok, v)
				}
			}
			for _, k := range tc.notEnv {
				if v, ok := env[k]; ok {
					t.Errorf("%s = %q is set; the container's requests hold no such card", k, v)
				}
			}
			var nodes []string
			for _, d := range ociSpec.Linux.Devices {
				if d.Path != "/dev/nvidiactl" {
					nodes = append(nodes, d.Path)
				}
			}
			slices.Sort(nodes)
			if !reflect.DeepEqual(nodes, tc.wantNodes) {
				t.Errorf("card device nodes = %q, want %q", nodes, tc.wantNodes)
			}
		})
	}
}

package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// fakeHardware adds one device node per card and one driver library.
type fakeHardware struct{ err error }

func (f fakeHardware) CardEdits(g gpu.GPU) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void", "CARD_VAR=1"}, DeviceNodes: []*cdispec.DeviceNode{{Path: fmt.Sprintf("/dev/nvidia%d", g.Minor), Type: "c", Major: 195, Minor: int64(g.Minor)}}}, f.err
}

// MIGEdits gives a MIG device its card's node and a capability node.
func (f fakeHardware) MIGEdits(g gpu.GPU, m prepared.MIG) (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{
		{Path: fmt.Sprintf("/dev/nvidia%d", g.Minor), Type: "c", Major: 195, Minor: int64(g.Minor)},
		{Path: "/dev/nvidia-caps/nvidia-cap-" + m.UUID, Type: "c"},
	}}, f.err
}

func (f fakeHardware) CommonEdits() (cdispec.ContainerEdits, error) {
	return cdispec.ContainerEdits{
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib"},
		DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255}},
		Mounts:      []*cdispec.Mount{{HostPath: "/usr/lib/libcuda.so.1", ContainerPath: "/usr/lib/libcuda.so.1", Options: []string{"ro", "bind"}}},
	}, nil
}

func mixedResults() []testResult {
	return []testResult{
		whole("gpu-0", testGPU(0, uuid0)),
		share("gpu-1", testGPU(1, uuid1), share1, "20Gi", "40", nil),
	}
}

func TestSpecRoundTrip(t *testing.T) {
	for _, hw := range []HardwareEdits{NoHardware{}, fakeHardware{}} {
		t.Run(reflect.TypeOf(hw).Name(), func(t *testing.T) {
			dir := t.TempDir()
			store, err := NewSpecStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			results := mixedResults()
			edits, err := run(testClaim, results)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := build(edits, testClaim, results, hw)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Write(uid, spec); err != nil {
				t.Fatal(err)
			}
			wantPath := filepath.Join(dir, "k8s.gpu.tangram.dev-claim_"+uid+".json")
			if store.Path(uid) != wantPath {
				t.Errorf("Path = %s, want %s", store.Path(uid), wantPath)
			}
			data, err := os.ReadFile(wantPath)
			if err != nil {
				t.Fatalf("spec file not where expected: %v", err)
			}
			// The CDI library's own parser and validation accept it.
			parsed, err := cdiapi.ParseSpec(data)
			if err != nil {
				t.Fatalf("ParseSpec: %v", err)
			}
			if !reflect.DeepEqual(parsed, spec) {
				t.Errorf("parsed spec differs from written:\n got %+v\nwant %+v", parsed, spec)
			}
			read, err := store.Read(uid)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if !reflect.DeepEqual(read, spec) {
				t.Errorf("Read differs from written")
			}

			// A runtime resolving our IDs finds them and gets the env.
			cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
			if err != nil {
				t.Fatalf("cache: %v", err)
			}
			ociSpec := &oci.Spec{Process: &oci.Process{}}
			// A container naming the whole claim: every device, then the
			// claim-wide one (the claim has two requests).
			ids := []string{edits.Devices[0].ID, edits.Devices[1].ID, edits.ClaimWide.ID}
			if unresolved, err := cache.InjectDevices(ociSpec, ids...); err != nil {
				t.Fatalf("InjectDevices: unresolved %v: %v", unresolved, err)
			}
			for _, want := range []string{
				"NVIDIA_VISIBLE_DEVICES=" + uuid0 + "," + uuid1,
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + uuid1 + "=20480M",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40",
				"TANGRAM_SHARING_BACKEND=exclusive,mps",
			} {
				if !slices.Contains(ociSpec.Process.Env, want) {
					t.Errorf("injected env lacks %q: %q", want, ociSpec.Process.Env)
				}
			}
			if _, ok := hw.(fakeHardware); ok {
				// Hardware variables are kept unless they collide with ours.
				for _, want := range []string{"CARD_VAR=1", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib"} {
					if !slices.Contains(ociSpec.Process.Env, want) {
						t.Errorf("injected env lacks hardware variable %q", want)
					}
				}
				if slices.Contains(ociSpec.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") {
					t.Errorf("hardware edits overrode NVIDIA_VISIBLE_DEVICES: %q", ociSpec.Process.Env)
				}
				var nodes []string
				for _, d := range ociSpec.Linux.Devices {
					nodes = append(nodes, d.Path)
				}
				slices.Sort(nodes)
				if want := []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}; !reflect.DeepEqual(nodes, want) {
					t.Errorf("injected device nodes = %q, want %q", nodes, want)
				}
			}
		})
	}
}

func TestBuildSpecErrors(t *testing.T) {
	results := mixedResults()
	edits, err := run(testClaim, results)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := build(edits, testClaim, results[:1], NoHardware{}); err == nil {
		t.Error("BuildSpec accepted fewer results than devices")
	}
	_, err = build(edits, testClaim, results, fakeHardware{err: errors.New("no such device")})
	want := "building CDI spec for claim " + uid + ": device nodes of gpu-0: no such device"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

func TestSpecStoreListAndRemove(t *testing.T) {
	dir := t.TempDir()
	store, err := NewSpecStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Other vendors' specs and stray files must be ignored.
	for _, name := range []string{"nvidia.com-gpu.yaml", "k8s.gpu.tangram.dev-claim_.json", "k8s.gpu.tangram.dev-claim_x.tmp", "README"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An old YAML spec of ours counts too.
	if err := os.WriteFile(filepath.Join(dir, "k8s.gpu.tangram.dev-claim_old-uid.yaml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	results := []testResult{whole("gpu-0", testGPU(0, uuid0))}
	for _, claimUID := range []string{"uid-a", "uid-b"} {
		edits, err := run(prepared.Claim{UID: claimUID, Namespace: "ns", Name: "c"}, results)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := build(edits, prepared.Claim{UID: claimUID, Namespace: "ns", Name: "c"}, results, NoHardware{})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Write(claimUID, spec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"old-uid", "uid-a", "uid-b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	for _, claimUID := range []string{"uid-a", "old-uid", "never-written"} {
		if err := store.Remove(claimUID); err != nil {
			t.Errorf("Remove(%s): %v", claimUID, err)
		}
	}
	got, err = store.List()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"uid-b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List after Remove = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "nvidia.com-gpu.yaml")); err != nil {
		t.Errorf("another vendor's spec was touched: %v", err)
	}
}

func TestSpecStoreWriteRejectsInvalidSpec(t *testing.T) {
	store, err := NewSpecStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bad := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: "k8s.gpu.tangram.dev/claim",
		Devices: []cdispec.Device{{Name: "-bad-", ContainerEdits: cdispec.ContainerEdits{Env: []string{"A=1"}}}}}
	if err := store.Write("u", bad); err == nil {
		t.Error("Write accepted an invalid device name")
	}
	if uids, _ := store.List(); len(uids) != 0 {
		t.Errorf("invalid spec left a file: %q", uids)
	}
}

// TestMIGDeviceSpec: a MIG partition's CDI device shows the container its
// MIG device only (NVIDIA_VISIBLE_DEVICES is the MIG UUID, not the card's),
// with its profile's memory, and carries the MIG device's hardware edits
// (its card's node and capability nodes); two partitions of one card in a
// claim are two devices.
func TestMIGDeviceSpec(t *testing.T) {
	card := testGPU(3, uuid0)
	gi, ci := 1, 0
	mig := func(dev string, profile, start, size int, uuid string, mem int64) testResult {
		return testResult{Device: prepared.Device{Request: "gpu", Device: dev, GPUUUID: card.UUID, MemoryBytes: mem,
			MIG: &prepared.MIG{ParentIndex: 3, ProfileID: profile, Profile: "p", Start: start, Size: size, GPUInstanceID: &gi, ComputeInstanceID: &ci, UUID: uuid}},
			GPU: card}
	}
	const small, large = "MIG-11111111-1111-5111-8111-111111111111", "MIG-22222222-2222-5222-8222-222222222222"
	results := []testResult{mig("gpu-3-mig-19-0", 19, 0, 1, small, 10<<30), mig("gpu-3-mig-9-4", 9, 4, 4, large, 40<<30)}
	results[1].Request = "big"
	claim := prepared.Claim{UID: "uid-1", Namespace: "ns", Name: "c"}
	edits, err := run(claim, results)
	if err != nil {
		t.Fatal(err)
	}
	c, in := claimOf(claim, results)
	in.Cards = map[string]gpu.GPU{"gpu-3": card}
	spec, err := BuildSpec(edits, c, in.Cards, fakeHardware{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct{ uuid, mem string }{{small, "10240"}, {large, "40960"}} {
		env := spec.Devices[i].ContainerEdits.Env
		if !slices.Contains(env, "NVIDIA_VISIBLE_DEVICES="+want.uuid) || !slices.Contains(env, "TANGRAM_GPU_MEMORY_LIMIT_MIB="+want.mem) {
			t.Errorf("device %d env %v, want its MIG device %s only with %s MiB", i, env, want.uuid, want.mem)
		}
		nodes := spec.Devices[i].ContainerEdits.DeviceNodes
		if len(nodes) != 2 || nodes[1].Path != "/dev/nvidia-caps/nvidia-cap-"+want.uuid || nodes[0].Path != "/dev/nvidia3" {
			t.Errorf("device %d nodes %v, want the card's and the MIG device's capability node", i, nodes)
		}
	}
}

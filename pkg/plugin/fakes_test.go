package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/checkpoint"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/plugintest"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// crashSignal is panicked by a step hook to simulate the process dying
// right after that step; tests recover it and start a new Driver.
type crashSignal struct{ step string }

// steps counts side effects and can crash after the n-th occurrence of one.
type steps struct {
	mu      sync.Mutex
	counts  map[string]int
	crashAt string
	crashN  int
}

func (s *steps) after(step string) {
	s.mu.Lock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.counts[step]++
	crash := step == s.crashAt && s.counts[step] == s.crashN
	s.mu.Unlock()
	if crash {
		panic(crashSignal{step: step})
	}
}

func (s *steps) count(step string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[step]
}

// stepState wraps the real pkg/plugin/checkpoint-backed store and reports saves.
type stepState struct {
	checkpoint.Claims
	steps *steps
	// beforeSave, when set, runs at the start of every Save; tests use it
	// to hold a call at a known point or to fail the save. Set it only
	// while no call runs.
	beforeSave func() error
	// onLock, when set, runs at the start of every Lock, the MPS worker's
	// too. Set it only while no call runs.
	onLock func()
	// synced and unsynced count the saves that waited for the disk and
	// those that did not.
	synced, unsynced atomic.Int64
}

func (s *stepState) Lock(ctx context.Context) (func(), error) {
	if s.onLock != nil {
		s.onLock()
	}
	return s.Claims.Lock(ctx)
}

func (s *stepState) Save(ctx context.Context, records map[string]prepared.Claim) error {
	s.synced.Add(1)
	return s.save(func() error { return s.Claims.Save(ctx, records) })
}

// SaveUnsynced is a step "save" like Save: the crash tests crash after
// every write of the checkpoint, whether or not it waited for the disk (a
// crashed process loses neither).
func (s *stepState) SaveUnsynced(ctx context.Context, records map[string]prepared.Claim) error {
	s.unsynced.Add(1)
	return s.save(func() error { return s.Claims.SaveUnsynced(ctx, records) })
}

func (s *stepState) save(write func() error) error {
	if s.beforeSave != nil {
		if err := s.beforeSave(); err != nil {
			return err
		}
	}
	if err := write(); err != nil {
		return err
	}
	s.steps.after("save")
	return nil
}

// stepSpecs wraps the real pkg/plugin/cdi-backed store and reports steps.
type stepSpecs struct {
	cdi.ClaimSpecs
	steps *steps
	// failWrite makes Write fail without writing.
	failWrite error
}

func (s *stepSpecs) Write(ctx context.Context, claim prepared.Claim) ([][]string, error) {
	if s.failWrite != nil {
		return nil, s.failWrite
	}
	ids, err := s.ClaimSpecs.Write(ctx, claim)
	if err == nil {
		s.steps.after("spec-write")
	}
	return ids, err
}

func (s *stepSpecs) Remove(ctx context.Context, uid string) error {
	err := s.ClaimSpecs.Remove(ctx, uid)
	if err == nil {
		s.steps.after("spec-remove")
	}
	return err
}

func (s *stepSpecs) dir() string { return s.Store.Dir() }

// env returns the environment and mounts a container gets when the runtime
// injects the given CDI devices (in the kubelet's order) from the claim's
// spec, merged as containerd does, through the CDI library.
func (s *stepSpecs) env(ids []string) (map[string]string, []string, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(s.Store.Dir()), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, nil, err
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}}
	if unresolved, err := cache.InjectDevices(ociSpec, ids...); err != nil {
		return nil, nil, fmt.Errorf("injecting %v (unresolved %v): %w", ids, unresolved, err)
	}
	env := map[string]string{}
	var mounts []string
	for _, kv := range ociSpec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, m := range ociSpec.Mounts {
		mounts = append(mounts, m.Source+":"+m.Destination)
	}
	return env, mounts, nil
}

// stepShares wraps a mps.Manager and reports steps.
type stepShares struct {
	*mps.Manager
	steps *steps
}

func (s stepShares) Acquire(ctx context.Context, claim string, shares []mps.Share) error {
	if err := s.Manager.Acquire(ctx, claim, shares); err != nil {
		return err
	}
	s.steps.after("mps-acquire")
	return nil
}

func (s stepShares) Release(ctx context.Context, claim string) error {
	if err := s.Manager.Release(ctx, claim); err != nil {
		return err
	}
	s.steps.after("mps-release")
	return nil
}

// The test inventory (pkg/plugin/plugintest): four 80 GiB cards, the last
// in MIG mode.
const (
	cardMemory = plugintest.CardMemory
	migCard    = plugintest.MIGCard
)

func testGPUs() []gpu.GPU { return plugintest.GPUs() }
func testMIG() *gpu.MIG   { return plugintest.MIG() }

// stepMIG wraps the fake cards' MIG instances and reports steps.
type stepMIG struct {
	*fakegpu.Partitions
	steps *steps
}

func (s stepMIG) Create(ctx context.Context, card gpu.GPU, profileID, start int) (gpu.MIGInstance, error) {
	inst, err := s.Partitions.Create(ctx, card, profileID, start)
	if err == nil {
		s.steps.after("mig-create")
	}
	return inst, err
}

func (s stepMIG) Destroy(ctx context.Context, card gpu.GPU, gi int) error {
	err := s.Partitions.Destroy(ctx, card, gi)
	if err == nil {
		s.steps.after("mig-destroy")
	}
	return err
}

const testNode = plugintest.Node

// result builders
func wholeResult(request, deviceName string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: request, Driver: device.DriverName, Pool: testNode, Device: deviceName}
}

func shareResult(request, deviceName, shareID, memory, compute string) resourceapi.DeviceRequestAllocationResult {
	r := wholeResult(request, deviceName)
	id := types.UID(shareID)
	r.ShareID = &id
	r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		device.CapacityMemory: resource.MustParse(memory),
	}
	if compute != "" {
		r.ConsumedCapacity[device.CapacityCompute] = resource.MustParse(compute)
	}
	return r
}

func claimWith(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "claim-" + uid, UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
	seen := map[string]bool{}
	for _, r := range results {
		if !seen[r.Request] {
			seen[r.Request] = true
			c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: r.Request})
		}
	}
	return c
}

func withConfig(c *resourceapi.ResourceClaim, source resourceapi.AllocationConfigSource, params string, requests ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: device.DriverName, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	})
	return c
}

var errInjected = errors.New("injected failure")

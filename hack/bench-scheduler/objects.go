package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/dra"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/placement"
	"github.com/tangram-gpu/tangram/pkg/placement/sim"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
	"github.com/tangram-gpu/tangram/pkg/trace"
)

const namespace = "default"

// objects is the cluster of one run.
type objects struct {
	classes []*resourceapi.DeviceClass
	nodes   []*v1.Node
	slices  []*resourceapi.ResourceSlice
	claims  []*resourceapi.ResourceClaim
	pods    []*v1.Pod
}

// buildObjects makes n nodes, every other one a fake DGX H100 (8 × 80 GiB)
// and the others the first nodes of the openb node list (T4, P100, V100,
// A10, … with 1-8 cards), and m pods with their claims drawn with seed.
func buildObjects(traces string, n, m int, seed uint64) (*objects, error) {
	openb, err := trace.ReadNodes(filepath.Join(traces, "openb_node_list_gpu_node.csv"))
	if err != nil {
		return nil, fmt.Errorf("reading the openb node list: %w", err)
	}
	if len(openb) < n/2 {
		return nil, fmt.Errorf("the openb node list has %d nodes, %d wanted", len(openb), n/2)
	}
	o := &objects{classes: device.DeviceClasses()}
	shaped, err := sim.BuildCluster(openb[:n/2])
	if err != nil {
		return nil, err
	}
	dgx, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		return nil, err
	}
	for i := range n {
		name := fmt.Sprintf("node-%04d", i)
		var cpuMilli, memMiB int64
		var devices []resourceapi.Device
		if i%2 == 0 {
			gpus, err := fakegpu.NewFakeSource(name, dgx).GPUs(context.Background())
			if err != nil {
				return nil, err
			}
			if devices, err = resourceslices.Devices(gpus, resourceslices.Options{NodeName: name, Sharing: true}); err != nil {
				return nil, err
			}
			cpuMilli, memMiB = 96000, 1<<20
		} else {
			tn := openb[i/2]
			cpuMilli, memMiB = tn.CPUMilli, tn.MemoryMiB
			for _, s := range shaped.Slices[tn.Name] {
				devices = append(devices, s.Spec.Devices...)
			}
		}
		o.nodes = append(o.nodes, &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
			Status: v1.NodeStatus{
				Capacity:    nodeResources(cpuMilli, memMiB),
				Allocatable: nodeResources(cpuMilli, memMiB),
				Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			},
		})
		if len(devices) > 0 {
			o.slices = append(o.slices, &resourceapi.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu"},
				Spec: resourceapi.ResourceSliceSpec{Driver: device.DriverName, NodeName: ptr.To(name), Devices: devices,
					Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}},
			})
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range m {
		name := fmt.Sprintf("pod-%04d", i)
		var req resourceapi.DeviceRequest
		if rng.IntN(10) < 7 {
			req = dra.SharedGPU("gpu", resource.MustParse(fmt.Sprintf("%dGi", 10+rng.IntN(31))), resource.Quantity{})
		} else {
			req = dra.WholeGPUs("gpu", int64(1+rng.IntN(8)))
		}
		claim := dra.Claim(name, nil, req)
		claim.UID = ""
		o.claims = append(o.claims, claim)
		o.pods = append(o.pods, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: v1.PodSpec{
				Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("2Gi")},
					Claims:   []v1.ResourceClaim{{Name: "gpu"}},
				}}},
				ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}},
			},
		})
	}
	return o, nil
}

func nodeResources(cpuMilli, memMiB int64) v1.ResourceList {
	return v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memMiB<<20, resource.BinarySI),
		v1.ResourcePods:   resource.MustParse("250"),
	}
}

// create writes every object, with a few workers per kind.
func (o *objects) create(ctx context.Context, c kubernetes.Interface) error {
	for _, dc := range o.classes {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating DeviceClass %s: %w", dc.Name, err)
		}
	}
	if err := parallel(len(o.nodes), func(i int) error {
		n, err := c.CoreV1().Nodes().Create(ctx, o.nodes[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", o.nodes[i].Name, err)
		}
		n.Status = o.nodes[i].Status
		if n, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("writing the status of node %s: %w", n.Name, err)
		}
		// The API server taints a new node not-ready until a kubelet
		// reports; there is none, and the node is ready by its status.
		n.Spec.Taints = nil
		if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("removing the not-ready taint of node %s: %w", n.Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := parallel(len(o.slices), func(i int) error {
		_, err := c.ResourceV1().ResourceSlices().Create(ctx, o.slices[i], metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating ResourceSlices: %w", err)
	}
	if err := parallel(len(o.claims), func(i int) error {
		_, err := c.ResourceV1().ResourceClaims(namespace).Create(ctx, o.claims[i], metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating ResourceClaims: %w", err)
	}
	if err := parallel(len(o.pods), func(i int) error {
		_, err := c.CoreV1().Pods(namespace).Create(ctx, o.pods[i], metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	return nil
}

// parallel runs f for 0..n-1 on 16 workers and returns the first error.
func parallel(n int, f func(int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// watchScheduling waits until every pod is settled (bound, or found
// unschedulable at least once) and measures the rate from the first to the
// last settled pod, which leaves the scheduler's start-up out.
func watchScheduling(ctx context.Context, c kubernetes.Interface, pods int, timeout time.Duration) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return result{}, fmt.Errorf("listing pods: %w", err)
	}
	w, err := c.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return result{}, fmt.Errorf("watching pods: %w", err)
	}
	defer w.Stop()
	settled := map[string]bool{}
	bound := map[string]bool{}
	var first, last time.Time
	for len(settled) < pods {
		select {
		case <-ctx.Done():
			return result{}, fmt.Errorf("%d of %d pods settled (%d bound) within %s", len(settled), pods, len(bound), timeout)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return result{}, fmt.Errorf("the pod watch ended after %d of %d pods settled", len(settled), pods)
			}
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			p, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			isBound := p.Spec.NodeName != ""
			if isBound {
				bound[p.Name] = true
			}
			if settled[p.Name] || !(isBound || unschedulable(p)) {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			settled[p.Name] = true
		}
	}
	// Pods found unschedulable may still be bound later, when other pods'
	// claims change; count what is bound after a short quiet period.
	time.Sleep(2 * time.Second)
	final, err := c.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return result{}, fmt.Errorf("listing pods: %w", err)
	}
	res := result{settled: len(settled), elapsed: last.Sub(first)}
	for _, p := range final.Items {
		if p.Spec.NodeName != "" {
			res.bound++
		} else if res.example == "" {
			res.example = p.Name + ": " + unschedulableMessage(&p)
		}
	}
	if secs := res.elapsed.Seconds(); secs > 0 {
		res.podsPerSecond = float64(res.settled-1) / secs
	}
	return res, nil
}

func unschedulable(p *v1.Pod) bool { return unschedulableMessage(p) != "" }

func unschedulableMessage(p *v1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// gpuAllocation is the GPU the claims hold over the capacity the slices
// publish, by the placement model (a share counts its fraction).
func gpuAllocation(ctx context.Context, c kubernetes.Interface) (float64, error) {
	sl, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	cl, err := c.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	var claims []*resourceapi.ResourceClaim
	for i := range cl.Items {
		claims = append(claims, &cl.Items[i])
	}
	allocations := placement.AllocationsOf(claims)
	var allocated, capacity int64
	for i := range sl.Items {
		s := &sl.Items[i]
		cards, err := placement.CardsFromSlices(*s.Spec.NodeName, []*resourceapi.ResourceSlice{s})
		if err != nil {
			return 0, err
		}
		var onNode []placement.Allocation
		for _, a := range allocations {
			if len(a.Devices) > 0 && a.Devices[0].Pool == s.Spec.Pool.Name {
				onNode = append(onNode, a)
			}
		}
		n, err := cards.Node(0, 0, 0, 0, onNode)
		if err != nil {
			return 0, err
		}
		allocated += n.AllocatedMilli()
		capacity += n.CapacityMilli()
	}
	if capacity == 0 {
		return 0, fmt.Errorf("the slices publish no GPU")
	}
	return float64(allocated) / float64(capacity), nil
}

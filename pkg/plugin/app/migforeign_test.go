package app

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestRunPublishesForeignMIGTaintsFirst: the plugin's first publication
// already carries the taints of the partitions overlapping an instance
// Tangram did not create, found by start-up, so that no claim is
// allocated one in between.
func TestRunPublishesForeignMIGTaintsFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})
	dir := t.TempDir()
	sockDir := kubeletDirs(t)
	stateDir := filepath.Join(dir, "state")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The fake cards' instances outlive the plugin, in its state directory.
	if _, err := fakegpu.NewPartitions(filepath.Join(stateDir, fakegpu.PartitionsFileName)).InjectGPUInstance(testGPUs()[migCard], 9, 4, 4, true); err != nil {
		t.Fatal(err)
	}
	slicesWatch, err := client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer slicesWatch.Stop()
	done := make(chan error, 1)
	go func() {
		done <- parseAndRun(ctx, Options{
			CDIRoot:      filepath.Join(dir, "cdi"),
			RegistrarDir: filepath.Join(sockDir, "reg"),
			PluginDir:    filepath.Join(sockDir, "plugin"),
			StateDir:     stateDir,
			Publish:      true,
			MPSOptions:   MPSOptions{MPSRoot: filepath.Join(dir, "mps"), MPSShmSize: "0", MPSDaemonMode: MPSDaemonProcess},
		}, Node{
			NodeName: testNode, GPUs: testGPUs(), FakeGPUs: true,
			Resources: func(map[string]string) (*resourceslice.DriverResources, error) {
				return resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode})
			},
			KubeClient: client,
		})
	}()
	select {
	case ev := <-slicesWatch.ResultChan():
		slice, ok := ev.Object.(*resourceapi.ResourceSlice)
		if ev.Type != watch.Added || !ok {
			t.Fatalf("first ResourceSlice event %s %T, want an added slice", ev.Type, ev.Object)
		}
		var tainted []string
		for _, d := range slice.Spec.Devices {
			for _, taint := range d.Taints {
				if taint.Key == device.TaintKeyMIGPlacementTaken && taint.Value == device.MIGDeviceName(migCard, 9, 4) && taint.Effect == resourceapi.DeviceTaintEffectNoSchedule {
					tainted = append(tainted, d.Name)
				}
			}
		}
		// The 1g.10gbs at 4, 5 and 6, the 3g.40gb at 4, the 7g.80gb.
		want := []string{"gpu-3-mig-19-6", "gpu-3-mig-19-5", "gpu-3-mig-19-4", "gpu-3-mig-9-4", "gpu-3-mig-0-0"}
		if !slices.Equal(tainted, want) {
			t.Errorf("first publication tainted %v, want %v", tainted, want)
		}
	case err := <-done:
		t.Fatalf("Run returned before publishing: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing published")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancellation: %v", err)
	}
}

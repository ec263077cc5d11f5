package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2/ktesting"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestRunPublishesAndShutsDown runs the long-running mode against a fake
// API server: it reads the Node's labels, publishes ResourceSlices, serves
// the kubelet socket, and returns cleanly when its context ends (SIGTERM).
// With a pod UID (rolling updates) its sockets are named by the UID, so
// that the old and the new pod of a node can serve side by side.
func TestRunPublishesAndShutsDown(t *testing.T) {
	for _, podUID := range []string{"", "6c1b3f2e-0d4a-4e55-9b7a-2f0c8d9e1a11"} {
		t.Run("podUID="+podUID, func(t *testing.T) { runPublishesAndShutsDown(t, podUID) })
	}
}

func runPublishesAndShutsDown(t *testing.T, podUID string) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}}}
	client := fake.NewClientset(node)
	dir := t.TempDir()
	sockDir := kubeletDirs(t)
	// Watch before Run starts, so the published slice arrives as an event.
	slicesWatch, err := client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer slicesWatch.Stop()
	var seenLabels map[string]string
	done := make(chan error, 1)
	go func() {
		done <- parseAndRun(ctx, Options{
			CDIRoot:      filepath.Join(dir, "cdi"),
			RegistrarDir: filepath.Join(sockDir, "reg"),
			PluginDir:    filepath.Join(sockDir, "plugin"),
			StateDir:     filepath.Join(dir, "state"),
			PodUID:       podUID,
			Publish:      true,
			MPSOptions:   MPSOptions{MPSRoot: filepath.Join(dir, "mps"), MPSShmSize: "0", MPSDaemonMode: MPSDaemonProcess},
		}, Node{
			NodeName: testNode,
			GPUs:     testGPUs(),
			FakeGPUs: true,
			Sharing:  true,
			Resources: func(labels map[string]string) (*resourceslice.DriverResources, error) {
				seenLabels = labels
				return resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode, Sharing: true})
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
		// Three cards and the MIG card's ten partitions (1g.10gb at 0..6,
		// 3g.40gb at 0 and 4, 7g.80gb at 0; testMIG).
		if got := len(slice.Spec.Devices); got != 13 {
			t.Errorf("published %d devices, want 13", got)
		}
	case err := <-done:
		t.Fatalf("Run returned before publishing: %v", err)
	}
	draSocket, registrationSocket := "dra.sock", device.DriverName+"-reg.sock"
	if podUID != "" {
		draSocket = "dra-" + podUID + ".sock"
		registrationSocket = kubeletplugin.RollingUpdateRegistrarSocketFile(filepath.Join(sockDir, "reg"), device.DriverName, types.UID(podUID))
	}
	for _, socket := range []string{filepath.Join(sockDir, "plugin", draSocket), filepath.Join(sockDir, "reg", registrationSocket)} {
		if _, err := os.Stat(socket); err != nil {
			t.Errorf("kubelet socket missing: %v", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancellation: %v", err)
	}
	if seenLabels["topology.kubernetes.io/zone"] != "zone-a" {
		t.Errorf("Resources got node labels %v, want the Node's", seenLabels)
	}
}

// A real card's memory is rarely a whole number of share steps (an H100
// reports 81559 MiB): the memory one allocation may consume on it is the
// card's rounded down to the step, which the Driver then prepares as a
// whole card (pkg/plugin's TestWholeMemoryOfAnUnevenCardIsAWholeCard).
func TestAllocatableMemoryOfAnUnevenCard(t *testing.T) {
	card := gpu.GPU{Index: 0, UUID: "GPU-0", MemoryBytes: 81559 << 20}
	resources, err := resourceslices.DriverResources([]gpu.GPU{card}, resourceslices.Options{NodeName: testNode, Sharing: true})
	if err != nil {
		t.Fatal(err)
	}
	allocatable := allocatableMemory(resources)
	if got, want := allocatable["gpu-0"], int64(81408<<20); got != want {
		t.Errorf("allocatable memory of gpu-0 = %d, want %d (81559Mi rounded down to 256Mi)", got, want)
	}
}

// TestRunRefusesNegativeSizes: a negative size or duration is refused
// before anything starts, whoever builds the options.
func TestRunRefusesNegativeSizes(t *testing.T) {
	valid := Options{MPSOptions: MPSOptions{MPSShmSize: DefaultMPSShmSize, MPSDaemonMode: MPSDaemonProcess}}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{name: "/dev/shm size", edit: func(o *Options) { o.MPSShmSize = "-1" }, want: "--mps-shm-size=-1 is negative"},
		// Node{}: real GPUs, where 0 would be an unbounded directory on
		// the host, charged to no pod once its writer is gone.
		{name: "/dev/shm size 0 on real GPUs", edit: func(o *Options) { o.MPSShmSize, o.MPSRoot = "0", "/run/tangram/mps" },
			want: "--mps-shm-size=0: each claim's /dev/shm would be a plain directory under --mps-root (/run/tangram/mps) on the host, with no size bound"},
		{name: "idle grace", edit: func(o *Options) { o.MPSIdleGrace = -time.Second }, want: "--mps-idle-grace=-1s is negative"},
		{name: "health recovery", edit: func(o *Options) { o.HealthRecoverAfter = -time.Minute }, want: "--health-recover-after=-1m0s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := valid
			tc.edit(&opts)
			err := parseAndRun(context.Background(), opts, Node{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestRunRefusesAnMPSRootTooLongForItsSockets: the plugin does not start
// on an --mps-root under which the MPS control daemon's socket could not
// be bound (Linux: 107 bytes), and says which flag to shorten, rather than
// failing every share later.
func TestRunRefusesAnMPSRootTooLongForItsSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	long := filepath.Join(dir, strings.Repeat("m", 100))
	err = parseAndRun(ctx, Options{
		CDIRoot:      filepath.Join(dir, "cdi"),
		RegistrarDir: filepath.Join(sockDir, "reg"),
		PluginDir:    filepath.Join(sockDir, "plugin"),
		StateDir:     filepath.Join(dir, "state"),
		MPSOptions:   MPSOptions{MPSRoot: long, MPSShmSize: "0", MPSDaemonMode: MPSDaemonProcess},
	}, Node{
		NodeName: testNode,
		GPUs:     testGPUs(),
		FakeGPUs: true,
		Sharing:  true,
		Resources: func(map[string]string) (*resourceslice.DriverResources, error) {
			return resourceslices.DriverResources(testGPUs(), resourceslices.Options{NodeName: testNode, Sharing: true})
		},
		KubeClient: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}),
	})
	if err == nil || !strings.Contains(err.Error(), "--mps-root "+long) || !strings.Contains(err.Error(), "107") {
		t.Fatalf("Run with a %d-character --mps-root: %v, want a refusal naming --mps-root and the 107-byte limit", len(long), err)
	}
}

// parseAndRun parses opts for node, as the command does, and runs the
// plugin with the settings.
func parseAndRun(ctx context.Context, opts Options, node Node) error {
	settings, err := opts.Parse(node.FakeGPUs, node.DriverRoot.Path)
	if err != nil {
		return err
	}
	return Run(ctx, settings, node)
}

// TestRunRefusesSettingsNotParsedForItsNode: Run builds nothing from
// flags that were not checked for its node: settings not made by
// Options.Parse, or parsed for fake GPUs or another driver root than the
// node's, are refused before anything starts.
func TestRunRefusesSettingsNotParsedForItsNode(t *testing.T) {
	opts := Options{MPSOptions: MPSOptions{MPSShmSize: DefaultMPSShmSize, MPSDaemonMode: MPSDaemonProcess}}
	forFake, err := opts.Parse(true, "")
	if err != nil {
		t.Fatal(err)
	}
	forDriver, err := opts.Parse(false, "/driver")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		settings Settings
		node     Node
		want     string
	}{
		{name: "not parsed", settings: Settings{Options: opts}, want: "plugin settings were not parsed"},
		{name: "parsed for fake GPUs", settings: forFake, node: Node{}, want: "parsed for fake GPUs true"},
		{name: "parsed for another driver root", settings: forDriver, node: Node{NVIDIADriver: NVIDIADriver{DriverRoot: driverroot.Root{Path: "/other"}}}, want: `driver root "/driver", but the node has fake GPUs false and driver root "/other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.settings, tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

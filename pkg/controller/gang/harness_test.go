package gang

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/fixture"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
	"github.com/tangram-gpu/tangram/pkg/device"
)

const (
	testNS      = "team"
	testResync  = 30 * time.Second
	zone        = fixture.ZoneLabel
	testGangUID = types.UID("uid-gang")
)

// harness is a Reconciler over a fake clientset whose informer caches are
// filled by hand (sync copies what the fake API server holds), so every
// step is deterministic.
type harness struct {
	t       *testing.T
	kube    *fake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	factory informers.SharedInformerFactory
	gangs   cache.Indexer
	r       *Reconciler
	cluster *fixture.Cluster
}

func newHarness(t *testing.T, cluster *fixture.Cluster, gang *tangramv1.GpuGang, objects ...runtime.Object) *harness {
	t.Helper()
	if cluster == nil {
		cluster = fixture.New()
	}
	for _, s := range cluster.Snap.Slices {
		objects = append(objects, s)
	}
	for _, n := range cluster.Snap.Nodes {
		objects = append(objects, n)
	}
	for _, c := range cluster.Snap.Classes {
		objects = append(objects, c)
	}
	for _, c := range cluster.Snap.Claims {
		objects = append(objects, c)
	}
	kube := fake.NewClientset(objects...)
	// An empty scheme keeps gangs unstructured, as in a real dynamic client.
	scheme := runtime.NewScheme()
	var dynObjects []runtime.Object
	if gang != nil {
		u, err := ToUnstructured(gang)
		if err != nil {
			t.Fatal(err)
		}
		dynObjects = append(dynObjects, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{tangramv1.GroupVersionResource: "GpuGangList"}, dynObjects...)
	h := &harness{
		t: t, kube: kube, dyn: dyn, cluster: cluster,
		factory: informers.NewSharedInformerFactory(kube, 0),
		gangs:   cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
	}
	f := h.factory
	h.r = &Reconciler{
		Kube:          kube,
		Gangs:         DynamicGangs{Lister: cache.NewGenericLister(h.gangs, tangramv1.GroupVersionResource.GroupResource()), Client: dyn},
		Pods:          f.Core().V1().Pods().Lister(),
		Claims:        f.Resource().V1().ResourceClaims().Lister(),
		Templates:     f.Resource().V1().ResourceClaimTemplates().Lister(),
		Workloads:     f.Scheduling().V1beta1().Workloads().Lister(),
		PodGroups:     f.Scheduling().V1beta1().PodGroups().Lister(),
		Cluster:       informer.FromFactory(f),
		PendingResync: testResync,
	}
	h.sync()
	return h
}

// sync replaces every cache's contents with what the fake API server has.
func (h *harness) sync() {
	h.t.Helper()
	ctx := context.Background()
	replace := func(inf cache.SharedIndexInformer, items []any) {
		if err := inf.GetIndexer().Replace(items, ""); err != nil {
			h.t.Fatal(err)
		}
	}
	f := h.factory
	pods, _ := h.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	replace(f.Core().V1().Pods().Informer(), itemsOf(pods.Items))
	nodes, _ := h.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	replace(f.Core().V1().Nodes().Informer(), itemsOf(nodes.Items))
	claims, _ := h.kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	replace(f.Resource().V1().ResourceClaims().Informer(), itemsOf(claims.Items))
	slices, _ := h.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	replace(f.Resource().V1().ResourceSlices().Informer(), itemsOf(slices.Items))
	classes, _ := h.kube.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	replace(f.Resource().V1().DeviceClasses().Informer(), itemsOf(classes.Items))
	templates, _ := h.kube.ResourceV1().ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
	replace(f.Resource().V1().ResourceClaimTemplates().Informer(), itemsOf(templates.Items))
	workloads, _ := h.kube.SchedulingV1beta1().Workloads("").List(ctx, metav1.ListOptions{})
	replace(f.Scheduling().V1beta1().Workloads().Informer(), itemsOf(workloads.Items))
	podGroups, _ := h.kube.SchedulingV1beta1().PodGroups("").List(ctx, metav1.ListOptions{})
	replace(f.Scheduling().V1beta1().PodGroups().Informer(), itemsOf(podGroups.Items))
	gangs, err := h.dyn.Resource(tangramv1.GroupVersionResource).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var items []any
	for i := range gangs.Items {
		items = append(items, &gangs.Items[i])
	}
	if err := h.gangs.Replace(items, ""); err != nil {
		h.t.Fatal(err)
	}
}

func itemsOf[T any](list []T) []any {
	out := make([]any, len(list))
	for i := range list {
		out[i] = &list[i]
	}
	return out
}

// reconcile runs one pass and syncs the caches afterwards.
func (h *harness) reconcile(name string) (time.Duration, error) {
	h.t.Helper()
	after, err := h.r.Reconcile(context.Background(), testNS, name)
	h.sync()
	return after, err
}

// gang reads the gang back from the fake API server.
func (h *harness) gang(name string) *tangramv1.GpuGang {
	h.t.Helper()
	u, err := h.dyn.Resource(tangramv1.GroupVersionResource).Namespace(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	g, err := FromObject(u)
	if err != nil {
		h.t.Fatal(err)
	}
	return g
}

func (h *harness) create(obj runtime.Object) {
	h.t.Helper()
	if err := h.kube.Tracker().Add(obj); err != nil {
		h.t.Fatal(err)
	}
	h.sync()
}

// newGang is a gang of members whole cards per member.
func newGang(name string, members, cards int32, sameNVLink bool, topologyKey string) *tangramv1.GpuGang {
	return &tangramv1.GpuGang{
		TypeMeta:   metav1.TypeMeta{APIVersion: tangramv1.SchemeGroupVersion.String(), Kind: tangramv1.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: testGangUID, Generation: 1},
		Spec: tangramv1.GpuGangSpec{
			Members:     tangramv1.GangMembers{Count: members},
			GPUs:        tangramv1.MemberGPUs{Whole: &tangramv1.WholeGPUs{Count: cards, SameNVLinkDomain: sameNVLink}},
			TopologyKey: topologyKey,
		},
	}
}

// memberPod is a member pod of gang g; node "" leaves it pending. With a
// claim name, the pod's status points at that claim.
func memberPod(g *tangramv1.GpuGang, name, node string, phase corev1.PodPhase, claim string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName:        node,
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To(PodGroupName(g))},
			ResourceClaims:  []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(TemplateName(g))}},
			Containers:      []corev1.Container{{Name: "main", Image: "x"}},
		},
		Status: corev1.PodStatus{Phase: phase},
	}
	if claim != "" {
		pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpus", ResourceClaimName: ptr.To(claim)}}
	}
	return pod
}

// allocatedClaim is a member's claim holding the given devices of a node.
func allocatedClaim(name, node string, devices ...string) *resourceapi.ResourceClaim {
	var results []resourceapi.DeviceRequestAllocationResult
	for _, d := range devices {
		results = append(results, resourceapi.DeviceRequestAllocationResult{Request: RequestName, Driver: device.DriverName, Pool: node, Device: d})
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

package plugin

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/plugin/cdi"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/podcheck"
)

const (
	strictClass  = "hard-shared-gpu.tangram.dev"
	defaultClass = "shared-gpu.tangram.dev"
)

// reservedShare is a share claim of class, reserved for the given consumers.
func reservedShare(uid, class string, consumers ...resourceapi.ResourceClaimConsumerReference) *resourceapi.ResourceClaim {
	c := claimWith(uid, shareResult("gpu", "gpu-0", "s-"+uid, "10Gi", ""))
	c.Spec.Devices.Requests[0].Exactly = &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	c.Status.ReservedFor = consumers
	return c
}

func podRef(p *corev1.Pod) resourceapi.ResourceClaimConsumerReference {
	return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID}
}

func testPod(name string, locked bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: testNode, Containers: []corev1.Container{{Name: "cuda"}}}}
	if locked {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)}
	}
	return p
}

// TestPrepareChecksReservingPods: a claim of a strict class is refused at
// prepare when a pod reserving it is not locked down (a pod admitted before
// its claim or template existed passed the admission policies), with the
// pod, container and field named, and nothing prepared; a locked-down pod's
// claim and a root pod's claim of the default class are prepared.
func TestPrepareChecksReservingPods(t *testing.T) {
	root := testPod("root", false)
	locked := testPod("locked", true)
	escalating := testPod("escalating", true)
	escalating.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	gangMember := testPod("member", false)
	gangMember.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("trainers")}
	gone := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "gone", UID: "uid-gone"}
	reincarnated := podRef(locked)
	reincarnated.UID = "uid-of-an-earlier-pod"

	for _, tc := range []struct {
		name     string
		claim    *resourceapi.ResourceClaim
		classes  []string
		apiError error
		// namespaces: the --nonroot-namespace-selector; nsLabels: the
		// labels of the claim's namespace.
		namespaces string
		nsLabels   map[string]string
		want       string // "" prepared
		// wantStrict is the prepared claim's NonRootClass: the class
		// whose rule the create hook holds every later container to.
		wantStrict string
	}{
		{name: "root pod, strict class", claim: reservedShare("c1", strictClass, podRef(root)), classes: []string{strictClass},
			want: `pod default/root container "cuda": securityContext.runAsNonRoot must be true (on the container or the pod) for a share of class hard-shared-gpu.tangram.dev`},
		{name: "escalation allowed, strict class", claim: reservedShare("c2", strictClass, podRef(escalating)), classes: []string{strictClass},
			want: `pod default/escalating container "cuda": securityContext.allowPrivilegeEscalation must be false for a share of class hard-shared-gpu.tangram.dev`},
		{name: "locked-down pod, strict class", claim: reservedShare("c3", strictClass, podRef(locked)), classes: []string{strictClass},
			wantStrict: strictClass},
		{name: "root pod, default class", claim: reservedShare("c4", defaultClass, podRef(root)), classes: []string{strictClass}},
		{name: "root pod, default class made strict", claim: reservedShare("c5", defaultClass, podRef(root)), classes: []string{strictClass, defaultClass},
			want: `for a share of class shared-gpu.tangram.dev`},
		{name: "root gang member of a PodGroup", classes: []string{strictClass},
			claim: reservedShare("c6", strictClass, resourceapi.ResourceClaimConsumerReference{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "trainers", UID: "pg"}),
			want:  `pod default/member container "cuda": securityContext.runAsNonRoot`},
		{name: "a reserved pod that is gone", claim: reservedShare("c7", strictClass, gone, podRef(locked)), classes: []string{strictClass},
			wantStrict: strictClass},
		{name: "another incarnation of a pod", claim: reservedShare("c8", strictClass, reincarnated), classes: []string{strictClass},
			wantStrict: strictClass},
		{name: "unknown consumer kind", classes: []string{strictClass},
			claim: reservedShare("c9", strictClass, resourceapi.ResourceClaimConsumerReference{APIGroup: "example.com", Resource: "jobs", Name: "j", UID: "j"}),
			want:  "the claim is reserved for jobs j (group \"example.com\"), whose pods the plugin cannot read"},
		{name: "pods cannot be read: fail closed", claim: reservedShare("c10", strictClass, podRef(locked)), classes: []string{strictClass},
			apiError: errors.New("pods is forbidden"), want: "checking that the pods using the claim run as non-root: reading pod default/locked, which the claim is reserved for: pods is forbidden"},
		{name: "no classes: no check", claim: reservedShare("c11", strictClass, podRef(root))},
		{name: "namespace outside the selector", claim: reservedShare("c12", strictClass, podRef(root)), classes: []string{strictClass},
			namespaces: `{"matchLabels":{"tenancy":"shared"}}`},
		{name: "namespace inside the selector", claim: reservedShare("c13", strictClass, podRef(root)), classes: []string{strictClass},
			namespaces: `{"matchExpressions":[{"key":"tenancy","operator":"Exists"}]}`, nsLabels: map[string]string{"tenancy": "shared"},
			want: `pod default/root container "cuda": securityContext.runAsNonRoot`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			// A hard node: its shares' specs carry the create hook.
			h.specs.MemoryLimitHook = &cdi.MemoryLimitHook{Path: "/var/lib/tangram/bin/tangram-cdi-hook", DriverRoot: "/"}
			client := fake.NewClientset(root, locked, escalating, gangMember,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: tc.nsLabels}})
			if tc.apiError != nil {
				client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.apiError })
			}
			cfg := Config{Inventory: Inventory{NodeName: testNode, GPUs: testGPUs()}, State: h.state, Specs: h.specs, Configs: ResolveConfigs,
				KindConfig: KindConfig{Shares: h.shares}, MPSPipeDir: daemon.Layout{Root: filepath.Join(h.runDir, "mps")}.PipeDir(),
				APIClients: APIClients{PodCheck: podcheck.Checker{Classes: tc.classes, ReservingPods: podcheck.APIReservingPods(client, testNode)}}}
			selector, err := podcheck.ParseNamespaceSelector(tc.namespaces)
			if err != nil {
				t.Fatal(err)
			}
			if selector != nil {
				cfg.PodCheck.Namespaces = podcheck.APINamespaceMatcher(client, selector)
			}
			d, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.claim})
			if err != nil {
				t.Fatal(err)
			}
			got := res[tc.claim.UID]
			if tc.want == "" {
				if got.Err != nil {
					t.Fatalf("refused: %v", got.Err)
				}
				if len(got.Devices) != 1 {
					t.Errorf("devices %v, want one", got.Devices)
				}
				if rec := d.Records()[string(tc.claim.UID)]; rec.NonRootClass != tc.wantStrict {
					t.Errorf("prepared claim's NonRootClass %q, want %q", rec.NonRootClass, tc.wantStrict)
				}
				// The spec has every container that joins the claim
				// later checked by its create hook.
				spec, err := h.specs.Store.Read(string(tc.claim.UID))
				if err != nil {
					t.Fatal(err)
				}
				var hookArgs []string
				for _, dev := range spec.Devices {
					for _, hk := range dev.ContainerEdits.Hooks {
						hookArgs = append(hookArgs, strings.Join(hk.Args, " "))
					}
				}
				wantArg := "--non-root-class " + tc.wantStrict + " --claim-name default/claim-" + string(tc.claim.UID)
				if len(hookArgs) == 0 || strings.Contains(strings.Join(hookArgs, "\n"), "--non-root-class") != (tc.wantStrict != "") ||
					(tc.wantStrict != "" && !strings.Contains(hookArgs[0], wantArg)) {
					t.Errorf("create hooks of the claim's spec:\n%s\nwant one per device, with %q only for a strict class", strings.Join(hookArgs, "\n"), wantArg)
				}
				return
			}
			if got.Err == nil || !strings.Contains(got.Err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", got.Err, tc.want)
			}
			if !strings.HasPrefix(got.Err.Error(), "preparing claim default/claim-"+string(tc.claim.UID)+": ") {
				t.Errorf("error %q does not name the claim", got.Err)
			}
			if _, ok := d.Records()[string(tc.claim.UID)]; ok || h.specs.Exists(context.Background(), string(tc.claim.UID)) {
				t.Error("a refused claim left a record or a spec")
			}
		})
	}
}

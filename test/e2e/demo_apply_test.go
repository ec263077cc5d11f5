//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// The demo applies its YAML specs the way `kubectl apply -f` creates them:
// every object of the file in order, through the dynamic client, each
// error kept and the next object tried.

// objectFilter picks the objects of a spec file to apply.
type objectFilter func(obj *unstructured.Unstructured) bool

var (
	allObjects       objectFilter = func(*unstructured.Unstructured) bool { return true }
	withDemoLabel    objectFilter = func(o *unstructured.Unstructured) bool { _, ok := o.GetLabels()[demoPodLabel]; return ok }
	withoutDemoLabel objectFilter = func(o *unstructured.Unstructured) bool { _, ok := o.GetLabels()[demoPodLabel]; return !ok }
)

// demoAPI is the dynamic client and REST mapper the demo applies with.
type demoAPI struct {
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
}

var demoAPIOnce *demoAPI

func demoClients() *demoAPI {
	if demoAPIOnce != nil {
		return demoAPIOnce
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	Expect(err).NotTo(HaveOccurred())
	disc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	Expect(err).NotTo(HaveOccurred())
	demoAPIOnce = &demoAPI{dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
	return demoAPIOnce
}

// specObjects decodes a demo spec file's objects, in file order.
func specObjects(file string) []*unstructured.Unstructured {
	data, err := os.ReadFile(filepath.Join(*demoSpecDir, file))
	Expect(err).NotTo(HaveOccurred(), "reading demo spec %s", file)
	var objs []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		Expect(err).NotTo(HaveOccurred(), "reading a document of %s", file)
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			Expect(err).NotTo(HaveOccurred(), "decoding a document of %s", file)
		}
		if len(obj.Object) == 0 {
			continue // a document of comments only
		}
		objs = append(objs, obj)
	}
}

// resourceFor is the client of the object's resource, in its namespace
// when it has one.
func resourceFor(obj *unstructured.Unstructured) dynamic.ResourceInterface {
	api := demoClients()
	gvk := obj.GroupVersionKind()
	mapping, err := api.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	Expect(err).NotTo(HaveOccurred(), "the cluster does not serve %s (is the API group enabled, the CRD installed?)", gvk)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return api.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	return api.dynamic.Resource(mapping.Resource)
}

// tryApplySpec creates the file's objects that pass the filter and returns
// what the API server refused, each error naming its object.
func tryApplySpec(ctx context.Context, file string, filter objectFilter) []error {
	var errs []error
	for _, obj := range specObjects(file) {
		if !filter(obj) {
			continue
		}
		if _, err := resourceFor(obj).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", obj.GetKind(), obj.GetName(), err))
		}
	}
	return errs
}

// applySpec creates the file's objects that pass the filter; any refusal
// fails the scenario.
func applySpec(ctx context.Context, file string, filter objectFilter) {
	Expect(tryApplySpec(ctx, file, filter)).To(BeEmpty(), "applying %s", file)
}

// applyPodsOneByOne creates the file's objects without a demo label (the
// templates) first, then each pod in file order once the previous one is
// scheduled. Pods created together race in the scheduler: a share may be
// allocated before the previous pod's share is counted, and the shares land
// on two cards.
func applyPodsOneByOne(ctx context.Context, file string) {
	applySpec(ctx, file, withoutDemoLabel)
	for _, obj := range specObjects(file) {
		if !withDemoLabel(obj) {
			continue
		}
		_, err := resourceFor(obj).Create(ctx, obj, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "creating %s %s of %s", obj.GetKind(), obj.GetName(), file)
		if obj.GetKind() == "Pod" {
			boundNode(ctx, obj.GetNamespace(), obj.GetName())
		}
	}
}

// deleteSpec deletes the file's objects and waits until they are gone.
func deleteSpec(ctx context.Context, file string) {
	objs := specObjects(file)
	for _, obj := range objs {
		err := resourceFor(obj).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			Expect(err).NotTo(HaveOccurred(), "deleting %s %s of %s", obj.GetKind(), obj.GetName(), file)
		}
	}
	for _, obj := range objs {
		Eventually(func() bool {
			_, err := resourceFor(obj).Get(ctx, obj.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(pollEvery).Should(BeTrue(), "%s %s of %s is still there", obj.GetKind(), obj.GetName(), file)
	}
}

// pluginClientOn is a client that impersonates the chart's kubelet plugin
// service account with the node name a token bound to a pod on node
// carries: what the chart's ResourceSlice admission policy judges.
func pluginClientOn(node string) kubernetes.Interface {
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + *releaseNamespace + ":" + *helmRelease + "-kubelet-plugin",
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
	}
	client, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return client
}

package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
)

// Controller runs the Reconciler from a work queue fed by informers.
type Controller struct {
	reconciler *Reconciler
	queue      workqueue.TypedRateLimitingInterface[cache.ObjectName]
	synced     []cache.InformerSynced
}

// NewController registers the informers the reconciler needs and the event
// handlers that map pods, claims and owned objects back to their gang.
func NewController(kube kubernetes.Interface, gangClient dynamic.Interface, kubeInformers informers.SharedInformerFactory,
	gangInformers dynamicinformer.DynamicSharedInformerFactory, cluster *informer.Listers, pendingResync time.Duration) (*Controller, error) {
	r := &Reconciler{Kube: kube, PendingResync: pendingResync}
	c := &Controller{
		reconciler: r,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "gpugang"}),
	}
	gangs := gangInformers.ForResource(tangramv1.GroupVersionResource)
	pods := kubeInformers.Core().V1().Pods()
	claims := kubeInformers.Resource().V1().ResourceClaims()
	templates := kubeInformers.Resource().V1().ResourceClaimTemplates()
	workloads := kubeInformers.Scheduling().V1beta1().Workloads()
	podGroups := kubeInformers.Scheduling().V1beta1().PodGroups()

	r.Gangs = DynamicGangs{Lister: gangs.Lister(), Client: gangClient}
	r.Pods, r.Claims, r.Templates = pods.Lister(), claims.Lister(), templates.Lister()
	r.Workloads, r.PodGroups, r.Cluster = workloads.Lister(), podGroups.Lister(), cluster

	handlers := []struct {
		informer cache.SharedIndexInformer
		key      func(obj any) (cache.ObjectName, bool)
	}{
		{gangs.Informer(), func(obj any) (cache.ObjectName, bool) {
			name, err := cache.DeletionHandlingObjectToName(obj)
			return name, err == nil
		}},
		{pods.Informer(), podGang},
		{claims.Informer(), labelledGang},
		{templates.Informer(), labelledGang},
		{workloads.Informer(), labelledGang},
		{podGroups.Informer(), labelledGang},
	}
	for _, h := range handlers {
		enqueue := func(obj any) {
			if key, ok := h.key(obj); ok {
				c.queue.Add(key)
			}
		}
		if _, err := h.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
			DeleteFunc: enqueue,
		}); err != nil {
			return nil, fmt.Errorf("adding an event handler: %w", err)
		}
		c.synced = append(c.synced, h.informer.HasSynced)
	}
	c.synced = append(c.synced, cluster.HasSynced)
	return c, nil
}

// podGang maps a member pod to its gang: the PodGroup has the gang's name.
func podGang(obj any) (cache.ObjectName, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.SchedulingGroup == nil || pod.Spec.SchedulingGroup.PodGroupName == nil {
		return cache.ObjectName{}, false
	}
	return cache.ObjectName{Namespace: pod.Namespace, Name: *pod.Spec.SchedulingGroup.PodGroupName}, true
}

// labelledGang maps objects the gang created (and the claims made from its
// template, which inherit the label) to the gang.
func labelledGang(obj any) (cache.ObjectName, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return cache.ObjectName{}, false
	}
	name, ok := m.GetLabels()[LabelGang]
	return cache.ObjectName{Namespace: m.GetNamespace(), Name: name}, ok && name != ""
}

// HasSynced is true once all informers have their initial lists.
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run processes the queue with the given number of workers until ctx ends.
// Informers must have been started.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("waiting for the GpuGang controller's caches: %w", ctx.Err())
	}
	logger.Info("GpuGang controller started", "workers", workers)
	for range workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
	return nil
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "gpugang", key.String())
	after, err := c.reconciler.Reconcile(klog.NewContext(ctx, logger), key.Namespace, key.Name)
	switch {
	case err != nil:
		logger.Error(err, "Reconciling GpuGang failed; retrying")
		c.queue.AddRateLimited(key)
	case after > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, after)
	default:
		c.queue.Forget(key)
	}
	return true
}

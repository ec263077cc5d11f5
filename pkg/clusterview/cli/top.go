package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/clusterview/usageview"
	"github.com/tangram-gpu/tangram/pkg/device"
)

// pluginSelector selects the kubelet plugin's pods, as the chart labels
// them.
const pluginSelector = "app.kubernetes.io/component=kubelet-plugin"

// Reading the plugins' metrics: this many at once, each within this long.
const (
	metricsReaders = 16
	metricsTimeout = 10 * time.Second
)

// metricsReader reads a kubelet plugin pod's /metrics.
type metricsReader func(ctx context.Context, pod *corev1.Pod) ([]byte, error)

// proxyMetrics reads /metrics from the pod's metrics port (MetricsPort)
// through the API server's pod proxy.
func proxyMetrics(kube kubernetes.Interface) metricsReader {
	return func(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
		port, err := MetricsPort(pod)
		if err != nil {
			return nil, err
		}
		data, err := kube.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, port, "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading its /metrics through the API server: %w", err)
		}
		return data, nil
	}
}

// MetricsPort is the kubelet plugin container's port named metrics or, where it
// declares none (with hostNetwork the chart declares no ports), the port
// of its --metrics-address flag.
func MetricsPort(pod *corev1.Pod) (string, error) {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				return strconv.Itoa(int(p.ContainerPort)), nil
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, arg := range append(slices.Clone(c.Command), c.Args...) {
			addr, ok := strings.CutPrefix(arg, "--metrics-address=")
			if !ok {
				continue
			}
			if _, port, err := net.SplitHostPort(addr); err == nil && port != "" {
				return port, nil
			}
			return "", fmt.Errorf("it serves no metrics (--metrics-address=%q; chart metrics.enabled)", addr)
		}
	}
	return "", errors.New("it declares no port named metrics and no --metrics-address")
}

func newTopCommand(o *options) *cobra.Command {
	var node, pluginNamespace string
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Per node and card: what each share uses of what it was given, the busiest first, and processes no claim accounts for",
		Long: "kubectl tangram top reads the GPU usage the kubelet plugin of each node serves on its /metrics (the last round of\n" +
			"the processes NVML reports, each attributed to the prepared device its pod holds), through the API server's pod proxy.\n" +
			"It lists the plugin's pods in --plugin-namespace; ResourceSlices name the cards of a plugin whose series do not.",
		Example: "  kubectl tangram top\n" +
			"  kubectl tangram top --node gpu-node-3 -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, c, err := o.start()
			if err != nil {
				return err
			}
			v, err := top(cmd.Context(), c, pluginNamespace, node, time.Now())
			if err != nil {
				return err
			}
			if o.output != clusterview.FormatTable {
				return clusterview.WriteData(o.out, o.output, v)
			}
			return usageview.WriteTop(o.out, v, st)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "Show only this node")
	cmd.Flags().StringVar(&pluginNamespace, "plugin-namespace", "tangram-system", "Namespace Tangram is installed in, where its kubelet plugin pods run")
	return cmd
}

// top reads the plugins' metrics and the cards' names into the view at
// now. A pod whose metrics cannot be read is shown so; no plugin pod at
// all is an error.
func top(ctx context.Context, c *clients, namespace, node string, now time.Time) (*usageview.View, error) {
	pods, err := pluginPods(ctx, c.kube, namespace, node)
	if err != nil {
		return nil, err
	}
	read := c.metrics
	if read == nil {
		read = proxyMetrics(c.kube)
	}
	sources := make([]usageview.Source, len(pods))
	sem := make(chan struct{}, metricsReaders)
	var wg sync.WaitGroup
	for i, pod := range pods {
		sources[i] = usageview.Source{Node: pod.Spec.NodeName, Pod: pod.Name}
		if pod.Status.Phase != corev1.PodRunning {
			sources[i].Err = fmt.Errorf("the pod is %s", phase(pod))
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
			defer cancel()
			sources[i].Metrics, sources[i].Err = read(ctx, pod)
		})
	}
	wg.Wait()
	names, note := cardNames(ctx, c.kube, node)
	v := usageview.Build(sources, names, now)
	if note != "" {
		v.Notes = append(v.Notes, note)
	}
	return v, nil
}

func phase(pod *corev1.Pod) string {
	if pod.Status.Phase == "" {
		return "not started"
	}
	return string(pod.Status.Phase)
}

// pluginPods lists the kubelet plugin's scheduled pods in namespace, on
// node only when one is given.
func pluginPods(ctx context.Context, kube kubernetes.Interface, namespace, node string) ([]*corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: pluginSelector}
	if node != "" {
		opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}
	list, err := kube.CoreV1().Pods(namespace).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing the kubelet plugin's pods (namespace %s, label %s): %w", namespace, pluginSelector, err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != "" && (node == "" || p.Spec.NodeName == node) {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		where := ""
		if node != "" {
			where = " on node " + node
		}
		return nil, fmt.Errorf("no kubelet plugin pod%s in namespace %s with label %s: pass --plugin-namespace with the namespace Tangram is installed in", where, namespace, pluginSelector)
	}
	return pods, nil
}

// cardNames reads the cards' names from the driver's ResourceSlices; when
// they cannot be listed the view names the cards by UUID and says why.
func cardNames(ctx context.Context, kube kubernetes.Interface, node string) (usageview.CardNames, string) {
	selector := fields.Set{"spec.driver": device.DriverName}
	if node != "" {
		selector["spec.nodeName"] = node
	}
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: selector.String()})
	if err != nil {
		return nil, fmt.Sprintf("cards are shown by UUID: listing ResourceSlices failed: %v", err)
	}
	return usageview.CardNamesOf(list.Items), ""
}

//go:build helm

package helm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// valuesDir holds the chart's values per cluster kind, the files every
// script that installs the chart passes with -f (docs/testing.md).
const valuesDir = "values"

// TestClusterValues renders the chart with each combination of values files
// a script installs it with (the scripts named in each case) and checks
// what that cluster needs; every file of values/ must be in some case, so a
// new one is rendered (and its keys checked against the schema) here too.
func TestClusterValues(t *testing.T) {
	loopback := map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
	type want struct {
		pluginFlags   map[string]string
		noPluginFlags []string
		pluginEnv     map[string]string
		nodeSelector  map[string]string
		hostNetwork   bool
		// controller and scheduler: rendered, on the host network with loopback env.
		controlPlane bool
		// webhookLabel: the GpuConfig webhook's namespace label ("" = every namespace).
		webhookLabel string
		schedulerArg string
	}
	tests := []struct {
		name  string
		files []string
		sets  []string
		want  want
	}{
		{
			name:  "local cluster (hack/local-cluster/chart.sh install)",
			files: []string{"host-network.yaml", "local.yaml"},
			want: want{
				pluginFlags: map[string]string{"fake-profile": "dgx-h100", "v": "4", "cdi-root": "/var/run/cdi",
					"kubelet-plugin-dir": "/var/lib/kubelet/plugins/gpu.tangram.dev"},
				pluginEnv: loopback, hostNetwork: true, controlPlane: true,
				webhookLabel: "tangram.dev/gpuconfig-webhook",
				schedulerArg: "--feature-gates=GenericWorkload=true,DRAWorkloadResourceClaims=true,TopologyAwareWorkloadScheduling=true",
			},
		},
		{
			name:  "local cluster, demo (demo/run-local.sh: the webhook everywhere)",
			files: []string{"host-network.yaml", "local.yaml"},
			sets:  []string{"controller.webhook.namespaceSelector@json={}"},
			want: want{
				pluginFlags: map[string]string{"fake-profile": "dgx-h100"},
				pluginEnv:   loopback, hostNetwork: true, controlPlane: true,
			},
		},
		{
			name:  "local cluster, demo's MIG scenario (demo/run-local.sh: fake profile mig-h100 first)",
			files: []string{"host-network.yaml", "local.yaml", "mig.yaml"},
			sets:  []string{"controller.webhook.namespaceSelector@json={}"},
			want: want{
				pluginFlags: map[string]string{"fake-profile": "mig-h100", "v": "4"},
				pluginEnv:   loopback, hostNetwork: true, controlPlane: true,
			},
		},
		{
			name:  "local cluster over the mock driver root (hack/local-cluster/test-e2e-realpath.sh)",
			files: []string{"host-network.yaml", "local.yaml", "mock-driver-root.yaml", "realpath.yaml"},
			sets:  []string{"driverRoot=/var/lib/tangram-mock-driver"},
			want: want{
				pluginFlags:   map[string]string{"sysfs-root": "/driver-root/sys", "driver-proc-root": "/driver-root/proc", "mps-shm-size": "64Mi", "host-driver-root": "/var/lib/tangram-mock-driver"},
				noPluginFlags: []string{"fake-profile"},
				pluginEnv:     loopback, hostNetwork: true,
			},
		},
		{
			name:  "offline kind cluster (demo/run-local.sh DEMO_CLUSTER=kind)",
			files: []string{"host-network.yaml"},
			sets:  []string{"fakeGPU.profile=dgx-h100"},
			want: want{
				pluginFlags: map[string]string{"fake-profile": "dgx-h100", "v": "2"},
				pluginEnv:   loopback, hostNetwork: true, controlPlane: true,
			},
		},
		{
			name:  "offline kind cluster, mock driver root (demo/run-local.sh DEMO_CLUSTER=kind KIND_GPUS=mock)",
			files: []string{"host-network.yaml", "mock-driver-root.yaml"},
			sets:  []string{"driverRoot=/mock"},
			want: want{
				pluginFlags:   map[string]string{"sysfs-root": "/driver-root/sys", "driver-proc-root": "/driver-root/proc", "host-driver-root": "/mock"},
				noPluginFlags: []string{"fake-profile"},
				pluginEnv:     loopback, hostNetwork: true, controlPlane: true,
			},
		},
		{
			name:  "kind cluster with Docker (demo/kind-up.sh)",
			files: []string{"kind.yaml"},
			want: want{
				pluginFlags:  map[string]string{"fake-profile": "dgx-h100"},
				nodeSelector: map[string]string{"tangram.dev/fake-gpus": "true"},
			},
		},
	}
	used := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, f := range tc.files {
				used[f] = true
				args = append(args, "--values="+filepath.Join(valuesDir, f))
			}
			objs := render(t, append(args, tc.sets...)...)
			ds, c := daemonSet(t, objs)
			flags := flagValues(c.Args)
			for k, v := range tc.want.pluginFlags {
				if flags[k] != v {
					t.Errorf("plugin flag --%s = %q, want %q", k, flags[k], v)
				}
			}
			for _, k := range tc.want.noPluginFlags {
				if v, ok := flags[k]; ok {
					t.Errorf("plugin has --%s=%s, want none", k, v)
				}
			}
			pod := ds.Spec.Template.Spec
			if pod.HostNetwork != tc.want.hostNetwork {
				t.Errorf("plugin hostNetwork = %v, want %v", pod.HostNetwork, tc.want.hostNetwork)
			}
			checkEnv(t, "plugin", c.Env, tc.want.pluginEnv)
			for k, v := range tc.want.nodeSelector {
				if pod.NodeSelector[k] != v {
					t.Errorf("plugin nodeSelector[%s] = %q, want %q", k, pod.NodeSelector[k], v)
				}
			}
			for _, name := range []string{"tangram-controller", schedulerName} {
				if !tc.want.controlPlane {
					if objs.has("Deployment", name) {
						t.Errorf("Deployment %s is rendered, want none", name)
					}
					continue
				}
				dep := objs.get(t, "Deployment", name).(*appsv1.Deployment)
				if !dep.Spec.Template.Spec.HostNetwork {
					t.Errorf("%s is not on the host network", name)
				}
				checkEnv(t, name, dep.Spec.Template.Spec.Containers[0].Env, loopback)
			}
			if !tc.want.controlPlane {
				return
			}
			ctrl := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
			if got := flagValues(ctrl.Spec.Template.Spec.Containers[0].Args)["metrics-address"]; got != ":9401" {
				t.Errorf("controller --metrics-address = %q, want :9401 (off the host-network plugin's 9400)", got)
			}
			hook := objs.get(t, "ValidatingWebhookConfiguration", "tangram-controller-gpuconfig").(*admissionregistrationv1.ValidatingWebhookConfiguration)
			var labels []string
			if sel := hook.Webhooks[0].NamespaceSelector; sel != nil {
				for k := range sel.MatchLabels {
					labels = append(labels, k)
				}
			}
			if want := tc.want.webhookLabel; (want == "" && len(labels) != 0) || (want != "" && !slices.Equal(labels, []string{want})) {
				t.Errorf("webhook namespace labels = %v, want %q", labels, want)
			}
			_, sc, _ := schedulerObjects(t, objs)
			if got := flagValues(sc.Args)["secure-port"]; got != "10359" {
				t.Errorf("scheduler --secure-port = %q, want 10359 (the default kube-scheduler has 10259)", got)
			}
			if a := tc.want.schedulerArg; a != "" && !slices.Contains(sc.Args, a) {
				t.Errorf("scheduler args %v lack %s", sc.Args, a)
			}
		})
	}
	entries, err := os.ReadDir(valuesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") && !used[e.Name()] {
			t.Errorf("%s/%s is in no case of TestClusterValues: add the combination of values files that uses it", valuesDir, e.Name())
		}
	}
}

func checkEnv(t *testing.T, who string, env []corev1.EnvVar, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, e := range env {
		got[e.Name] = e.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s env %s = %q, want %q", who, k, got[k], v)
		}
	}
}

//go:build helm

package helm

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const pluginName = "tangram-kubelet-plugin"

func daemonSet(t *testing.T, objs objects) (*appsv1.DaemonSet, corev1.Container) {
	t.Helper()
	ds := objs.get(t, "DaemonSet", pluginName).(*appsv1.DaemonSet)
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("plugin pod has %d containers, want 1", n)
	}
	return ds, ds.Spec.Template.Spec.Containers[0]
}

// flagValues maps --flag=value arguments to their values.
func flagValues(args []string) map[string]string {
	flags := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
			flags[strings.TrimLeft(k, "-")] = v
		}
	}
	return flags
}

func TestPluginDaemonSet(t *testing.T) {
	tests := []struct {
		name      string
		sets      []string
		wantFlags map[string]string
		// noFlags must not appear at all.
		noFlags   []string
		wantImage string
		wantFake  bool
	}{
		{
			name: "defaults: real GPUs, sharing on",
			wantFlags: map[string]string{
				"sharing": "enabled", "cdi-root": "/var/run/cdi",
				"kubelet-registrar-dir": "/var/lib/kubelet/plugins_registry",
				"kubelet-plugin-dir":    "/var/lib/kubelet/plugins/gpu.tangram.dev",
				"state-dir":             "/var/lib/tangram", "mps-root": "/run/tangram/mps",
				"healthz-address": ":51515", "metrics-address": ":9400", "v": "2",
				// The MPS daemon runs in a pod of its own from the plugin's image.
				"mps-daemon": "pod", "mps-daemon-image": "localhost/tangram/dra-kubelet-plugin:dev",
				"mps-daemon-image-pull-policy": "IfNotPresent", "mps-daemon-pod-prefix": "tangram",
				"mps-daemon-driver-root": "/", "mps-daemon-priority-class": "system-node-critical",
				// The daemon outlives short idle periods.
				"mps-idle-grace": "5m",
				// Each claim's /dev/shm is small: its pages outlive
				// their writer's pod, charged to no pod.
				"mps-shm-size": "64Mi",
				// Classic daemons serve every user at once (-M).
				"mps-multi-user": "true",
				// NVML and the driver's programs come from the mount.
				"driver-root": "/driver-root", "host-driver-root": "/",
				// GPU health: the default XID table, recovery after 10m quiet.
				"health-monitor": "true", "health-informational-xids": "13,31,43,45,68,109",
				"health-ignored-xids": "", "health-recover-after": "10m",
			},
			noFlags:   []string{"fake-profile", "fake-profile-file", "node-label-attributes", "mps-daemon-image-pull-secrets", "sysfs-root", "driver-proc-root"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "classic MPS one user at a time",
			sets:      []string{"kubeletPlugin.mps.multiUser=false"},
			wantFlags: map[string]string{"mps-multi-user": "false"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			// On the host network declared ports would be host ports, which
			// keep an upgrade's new pod off the node until the old is gone.
			name: "host network: no declared ports, probes by number",
			sets: []string{"fakeGPU.profile=dgx-h100", "kubeletPlugin.hostNetwork=true"},
			wantFlags: map[string]string{
				"fake-profile": "dgx-h100", "healthz-address": ":51515", "metrics-address": ":9400",
			},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
			wantFake:  true,
		},
		{
			name: "demo values",
			sets: []string{"fakeGPU.profile=dgx-h100", "sharing.enabled=false", "logVerbosity=5",
				"nodeLabelAttributes={topology.kubernetes.io/zone,example.com/ib-zone}",
				"image.tag=v9", "kubeletPlugin.image.repository=registry.example:5000/tangram/plugin",
				"metrics.enabled=false", "kubeletPlugin.hostPaths.kubeletRoot=/data/kubelet/"},
			wantFlags: map[string]string{
				"fake-profile": "dgx-h100", "sharing": "disabled", "v": "5",
				"node-label-attributes": "topology.kubernetes.io/zone,example.com/ib-zone",
				"metrics-address":       "",
				"kubelet-plugin-dir":    "/data/kubelet/plugins/gpu.tangram.dev",
				"kubelet-registrar-dir": "/data/kubelet/plugins_registry",
				"mps-daemon-image":      "registry.example:5000/tangram/plugin:v9",
			},
			// Fake GPUs: the stand-in daemon needs no driver.
			noFlags:   []string{"fake-profile-file", "mps-daemon-driver-root", "driver-root", "host-driver-root", "sysfs-root", "driver-proc-root"},
			wantImage: "registry.example:5000/tangram/plugin:v9",
			wantFake:  true,
		},
		{
			name: "GPU health table from values",
			sets: []string{"kubeletPlugin.deviceHealth.enabled=false", "kubeletPlugin.deviceHealth.informationalXIDs={13,79}",
				"kubeletPlugin.deviceHealth.ignoredXIDs={31}", "kubeletPlugin.deviceHealth.recoverAfter=90s"},
			wantFlags: map[string]string{"health-monitor": "false", "health-informational-xids": "13,79",
				"health-ignored-xids": "31", "health-recover-after": "90s"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "MPS daemon stopped as soon as idle",
			sets:      []string{"kubeletPlugin.mps.idleGrace=0"},
			wantFlags: map[string]string{"mps-idle-grace": "0"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "an admin's opt-in for a larger /dev/shm per claim",
			sets:      []string{"kubeletPlugin.mps.shmSize=8Gi"},
			wantFlags: map[string]string{"mps-shm-size": "8Gi"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			// Fake GPUs use plain directories whatever the size.
			name:      "fake GPUs take shmSize 0",
			sets:      []string{"fakeGPU.profile=dgx-h100", "kubeletPlugin.mps.shmSize=0"},
			wantFlags: map[string]string{"fake-profile": "dgx-h100", "mps-shm-size": "0"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
			wantFake:  true,
		},
		{
			name:      "MPS daemon as a child process",
			sets:      []string{"kubeletPlugin.mps.daemon=process"},
			wantFlags: map[string]string{"mps-daemon": "process"},
			noFlags: []string{"mps-daemon-image", "mps-daemon-image-pull-policy", "mps-daemon-pod-prefix",
				"mps-daemon-driver-root", "mps-daemon-image-pull-secrets", "mps-daemon-priority-class"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name: "MPS daemon pod: driver root, pull policy and secrets",
			sets: []string{"driverRoot=/run/nvidia/driver", "image.pullPolicy=Always",
				"imagePullSecrets[0].name=regcred", "imagePullSecrets[1].name=mirror"},
			wantFlags: map[string]string{
				"mps-daemon": "pod", "mps-daemon-driver-root": "/run/nvidia/driver",
				"driver-root": "/driver-root", "host-driver-root": "/run/nvidia/driver",
				"mps-daemon-image-pull-policy": "Always", "mps-daemon-image-pull-secrets": "regcred,mirror",
			},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			// An empty priority class is passed on as none for the daemon
			// pod too, not left to the flag's default.
			name:      "MPS daemon pod: no priority class",
			sets:      []string{"kubeletPlugin.priorityClassName="},
			wantFlags: map[string]string{"mps-daemon": "pod", "mps-daemon-priority-class": ""},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "MPS daemon pod: the plugin's priority class",
			sets:      []string{"kubeletPlugin.priorityClassName=gpu-infra"},
			wantFlags: map[string]string{"mps-daemon-priority-class": "gpu-infra"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "mock driver root: sysfs inside it",
			sets:      []string{"driverRoot=/var/lib/tangram-mock-driver", "kubeletPlugin.sysfsRoot=/driver-root/sys", "kubeletPlugin.driverProcRoot=/driver-root/proc"},
			wantFlags: map[string]string{"driver-root": "/driver-root", "host-driver-root": "/var/lib/tangram-mock-driver", "sysfs-root": "/driver-root/sys", "driver-proc-root": "/driver-root/proc"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "the admin's sharing backend",
			sets:      []string{"sharing.backend=none"},
			wantFlags: map[string]string{"share-backend": "none"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
		},
		{
			name:      "custom fake profile file",
			sets:      []string{"fakeGPU.profileFile=name: tiny\ngpus: []\n"},
			wantFlags: map[string]string{"fake-profile-file": "/etc/tangram/fake-profile.yaml"},
			noFlags:   []string{"fake-profile"},
			wantImage: "localhost/tangram/dra-kubelet-plugin:dev",
			wantFake:  true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			ds, c := daemonSet(t, objs)
			if c.Image != tc.wantImage {
				t.Errorf("image = %q, want %q", c.Image, tc.wantImage)
			}
			if len(c.Args) == 0 || c.Args[0] != "run" {
				t.Errorf("args = %v, want the run subcommand first", c.Args)
			}
			flags := flagValues(c.Args)
			for k, want := range tc.wantFlags {
				if got, ok := flags[k]; !ok || got != want {
					t.Errorf("--%s = %q (present %v), want %q; args %v", k, got, ok, want, c.Args)
				}
			}
			for _, k := range tc.noFlags {
				if _, ok := flags[k]; ok {
					t.Errorf("--%s must not be passed; args %v", k, c.Args)
				}
			}
			checkPluginPod(t, ds, c, flags, tc.wantFake)
			wantConfigMap := flags["fake-profile-file"] != ""
			if got := objs.has("ConfigMap", "tangram-fake-profile"); got != wantConfigMap {
				t.Errorf("fake profile ConfigMap rendered = %v, want %v", got, wantConfigMap)
			}
		})
	}
}

// checkPluginPod checks what must hold for every value set: node name from
// the downward API, host paths at the paths the flags name, probes on the
// healthz port, POD_UID from the downward API (the plugin names its kubelet
// sockets by it), a rolling update that starts the new pod before the old
// one stops (surge 1, none unavailable).
func checkPluginPod(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, flags map[string]string, fake bool) {
	t.Helper()
	fieldRefs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fieldRefs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if got := fieldRefs["NODE_NAME"]; got != "spec.nodeName" {
		t.Errorf("NODE_NAME comes from %q, want the downward API field spec.nodeName", got)
	}
	if got := fieldRefs["POD_UID"]; got != "metadata.uid" {
		t.Errorf("POD_UID comes from %q, want the downward API field metadata.uid", got)
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	// The plugin writes paths that the kubelet and containerd read on the
	// host, so each must be mounted at the same path it has on the host.
	for _, flag := range []string{"cdi-root", "kubelet-registrar-dir", "kubelet-plugin-dir", "state-dir", "mps-root"} {
		path := flags[flag]
		vol, ok := mounts[path]
		if !ok {
			t.Errorf("--%s=%s is not a mount path of the plugin container", flag, path)
			continue
		}
		if hostPaths[vol] != path {
			t.Errorf("--%s=%s is mounted from host path %q, want the same path", flag, path, hostPaths[vol])
		}
	}
	_, hasDriverRoot := mounts["/driver-root"]
	if hasDriverRoot == fake {
		t.Errorf("driver root mounted = %v, want %v (only real GPUs need the driver)", hasDriverRoot, !fake)
	}
	var healthzPort int32
	for _, p := range c.Ports {
		if p.Name == "healthz" {
			healthzPort = p.ContainerPort
		}
	}
	probePort := "healthz"
	if ds.Spec.Template.Spec.HostNetwork {
		if len(c.Ports) != 0 {
			t.Errorf("ports %+v on the host network, want none (they would be host ports)", c.Ports)
		}
		if p := c.StartupProbe; p != nil && p.HTTPGet != nil {
			healthzPort = int32(p.HTTPGet.Port.IntValue())
		}
		probePort = strconv.Itoa(int(healthzPort))
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != probePort {
			t.Errorf("%s probe = %+v, want HTTP GET /healthz on the healthz port", name, p)
		}
	}
	if want := ":" + strconv.Itoa(int(healthzPort)); flags["healthz-address"] != want {
		t.Errorf("--healthz-address=%s but the healthz port is %d", flags["healthz-address"], healthzPort)
	}
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 ||
		ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("update strategy = %+v, want RollingUpdate with surge 1 and none unavailable", ds.Spec.UpdateStrategy)
	}
	if ds.Spec.Template.Spec.ServiceAccountName != pluginName {
		t.Errorf("service account = %q, want %q", ds.Spec.Template.Spec.ServiceAccountName, pluginName)
	}
}

func TestRBAC(t *testing.T) {
	objs := render(t, "controller.enabled=true")
	plugin := objs.get(t, "ClusterRole", pluginName).(*rbacv1.ClusterRole)
	want := map[string][]string{
		"/nodes":                                {"get"},
		"resource.k8s.io/resourceclaims":        {"get", "list", "watch"},
		"resource.k8s.io/resourceclaims/status": {"patch"},
		"resource.k8s.io/resourceclaims/driver": {"associated-node:patch"},
		"resource.k8s.io/resourceslices":        {"create", "delete", "get", "list", "update", "watch"},
		// Node events when a GPU is tainted or recovers.
		"/events":              {"create", "patch", "update"},
		"events.k8s.io/events": {"create", "patch", "update"},
		// The node's pods, watched by the usage watcher (TestPluginUsage),
		// also the pods reserving a claim of a strict class, checked again
		// at prepare (TestNonRootDeviceClasses).
		"/pods": {"get", "list", "watch"},
	}
	got := map[string][]string{}
	for _, r := range plugin.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				verbs := slices.Clone(r.Verbs)
				slices.Sort(verbs)
				got[g+"/"+res] = verbs
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("plugin ClusterRole grants %v, want exactly %v", got, want)
	}
	for _, r := range plugin.Rules {
		if slices.Contains(r.Resources, "resourceclaims/driver") && !slices.Equal(r.ResourceNames, []string{"gpu.tangram.dev"}) {
			t.Errorf("status.devices rights reach drivers %v, want only gpu.tangram.dev", r.ResourceNames)
		}
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("plugin may %v on %s, want %v", got[k], k, v)
		}
	}
	for _, name := range []string{pluginName, "tangram-controller", "tangram-viewer"} {
		role := objs.get(t, "ClusterRole", name).(*rbacv1.ClusterRole)
		for _, r := range role.Rules {
			for _, s := range slices.Concat(r.Verbs, r.Resources, r.APIGroups) {
				if s == "*" {
					t.Errorf("ClusterRole %s has a wildcard rule %+v", name, r)
				}
			}
		}
	}
	viewer := objs.get(t, "ClusterRole", "tangram-viewer").(*rbacv1.ClusterRole)
	for _, r := range viewer.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("viewer role may %q on %v; it must be read-only", v, r.Resources)
			}
		}
	}
	binding := objs.get(t, "ClusterRoleBinding", pluginName).(*rbacv1.ClusterRoleBinding)
	if len(binding.Subjects) != 1 || binding.Subjects[0].Name != pluginName || binding.Subjects[0].Namespace != namespace {
		t.Errorf("plugin binding subjects = %+v, want the plugin service account in %s", binding.Subjects, namespace)
	}
}

// TestNonRootDeviceClasses: the plugin checks again at prepare the classes
// the admission policies check (--nonroot-device-classes): the strict class,
// plus the default one when sharing.requireHardEnforcement makes it strict;
// it may read pods only then.
func TestNonRootDeviceClasses(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string // "": no flag, no pod rights, no policy
		// wantNamespaces: --nonroot-namespace-selector, and get namespaces.
		wantNamespaces string
	}{
		{sets: []string{"sharing.requireHardEnforcement=false"}, want: "hard-shared-gpu.tangram.dev"},
		{sets: []string{"sharing.requireHardEnforcement=true"}, want: "hard-shared-gpu.tangram.dev,shared-gpu.tangram.dev"},
		{sets: []string{"sharing.requireHardEnforcement=true", "admissionPolicy.sharedGPURunAsNonRoot.deviceClasses={shared-gpu.tangram.dev,my-class}"},
			want: "shared-gpu.tangram.dev,my-class"},
		{sets: []string{"admissionPolicy.sharedGPURunAsNonRoot.enabled=false"}},
		// The plugin's check does not need the admission policies.
		{sets: []string{"admissionPolicy.enabled=false", "admissionPolicy.acknowledgeUnprotected=true", "kubeletPlugin.mps.daemon=process", "sharing.requireHardEnforcement=false"}, want: "hard-shared-gpu.tangram.dev"},
		// The same namespaces as the admission policies.
		{sets: []string{"sharing.requireHardEnforcement=false", "admissionPolicy.sharedGPURunAsNonRoot.namespaceSelector.matchLabels.tenancy=shared"},
			want: "hard-shared-gpu.tangram.dev", wantNamespaces: `{"matchLabels":{"tenancy":"shared"}}`},
	} {
		t.Run(strings.Join(tc.sets, ","), func(t *testing.T) {
			// The usage watcher reads pods too (TestPluginUsage).
			objs := render(t, append(tc.sets, "kubeletPlugin.usage.enabled=false")...)
			_, c := daemonSet(t, objs)
			got, ok := flagValues(c.Args)["nonroot-device-classes"]
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("--nonroot-device-classes=%q (set: %t), want %q", got, ok, tc.want)
			}
			if got, ok := flagValues(c.Args)["nonroot-namespace-selector"]; got != tc.wantNamespaces || ok != (tc.wantNamespaces != "") {
				t.Errorf("--nonroot-namespace-selector=%q (set: %t), want %q", got, ok, tc.wantNamespaces)
			}
			readsPods, readsNamespaces := false, false
			for _, r := range objs.get(t, "ClusterRole", pluginName).(*rbacv1.ClusterRole).Rules {
				if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "pods") {
					readsPods = true
				}
				if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "namespaces") {
					readsNamespaces = true
				}
			}
			if readsNamespaces != (tc.wantNamespaces != "") {
				t.Errorf("plugin may read namespaces: %t, want %t", readsNamespaces, tc.wantNamespaces != "")
			}
			if readsPods != (tc.want != "") {
				t.Errorf("plugin may read pods: %t, want %t", readsPods, tc.want != "")
			}
		})
	}
}

// TestPluginUsage: the usage watcher's flags, the host's PID namespace
// (hostPID, and no /proc of the host mounted: NVML answers in the plugin's
// own), watching pods (also with the non-root check's rule), and evicting
// them only with overShare or unaccounted evict.
func TestPluginUsage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sets       []string
		wantFlags  map[string]string
		wantHost   bool
		wantVerbs  []string // on pods; nil: none
		wantEvicts bool
	}{
		{name: "defaults", wantFlags: map[string]string{"usage-interval": "10s", "usage-over-share": "report", "usage-unaccounted": "report"},
			wantHost: true, wantVerbs: []string{"get", "list", "watch"}},
		{name: "over-share evict", sets: []string{"kubeletPlugin.usage.overShare=evict", "kubeletPlugin.usage.interval=5s"},
			wantFlags: map[string]string{"usage-interval": "5s", "usage-over-share": "evict"}, wantHost: true, wantVerbs: []string{"get", "list", "watch"}, wantEvicts: true},
		{name: "unaccounted evict", sets: []string{"kubeletPlugin.usage.unaccounted=evict"},
			wantFlags: map[string]string{"usage-over-share": "report", "usage-unaccounted": "evict"}, wantHost: true, wantVerbs: []string{"get", "list", "watch"}, wantEvicts: true},
		{name: "off", sets: []string{"kubeletPlugin.usage.enabled=false", "kubeletPlugin.usage.overShare=evict", "admissionPolicy.sharedGPURunAsNonRoot.enabled=false"},
			wantFlags: map[string]string{"usage-interval": "0"}},
		{name: "off, with the non-root check's pod reads", sets: []string{"kubeletPlugin.usage.enabled=false", "sharing.requireHardEnforcement=true"},
			wantFlags: map[string]string{"usage-interval": "0"}, wantVerbs: []string{"get", "list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			ds, c := daemonSet(t, objs)
			flags := flagValues(c.Args)
			for k, v := range tc.wantFlags {
				if flags[k] != v {
					t.Errorf("--%s=%q, want %q", k, flags[k], v)
				}
			}
			if _, ok := flags["usage-proc-root"]; ok {
				t.Error("--usage-proc-root set: the plugin reads its own /proc")
			}
			if got := ds.Spec.Template.Spec.HostPID; got != tc.wantHost {
				t.Errorf("hostPID %t, want %t", got, tc.wantHost)
			}
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.HostPath != nil && v.HostPath.Path == "/proc" {
					t.Errorf("volume %s mounts the host's /proc", v.Name)
				}
			}
			var verbs []string
			evicts := false
			for _, r := range objs.get(t, "ClusterRole", pluginName).(*rbacv1.ClusterRole).Rules {
				if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "pods") {
					verbs = append(verbs, r.Verbs...)
				}
				if slices.Contains(r.Resources, "pods/eviction") {
					evicts = slices.Equal(r.Verbs, []string{"create"})
				}
			}
			if !slices.Equal(verbs, tc.wantVerbs) {
				t.Errorf("plugin may %v pods, want %v", verbs, tc.wantVerbs)
			}
			if evicts != tc.wantEvicts {
				t.Errorf("plugin may evict pods: %t, want %t", evicts, tc.wantEvicts)
			}
		})
	}
}

// TestPluginMPSDaemonRBAC: the plugin may manage pods only in the MPS
// namespace (a Role there; none in the release namespace), only
// get/create/delete (what PodDaemon calls), and only when it runs the MPS
// daemon as a pod for shares.
func TestPluginMPSDaemonRBAC(t *testing.T) {
	const roleName = pluginName + "-mps-daemon"
	for _, tc := range []struct {
		name     string
		sets     []string
		wantRole bool
	}{
		{name: "default: daemon pod", wantRole: true},
		{name: "daemon as a child process", sets: []string{"kubeletPlugin.mps.daemon=process"}},
		{name: "sharing disabled: no daemon at all", sets: []string{"sharing.enabled=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			if got := objs.has("Role", roleName); got != tc.wantRole {
				t.Fatalf("Role %s rendered = %v, want %v", roleName, got, tc.wantRole)
			}
			if got := objs.has("RoleBinding", roleName); got != tc.wantRole {
				t.Fatalf("RoleBinding %s rendered = %v, want %v", roleName, got, tc.wantRole)
			}
			if !tc.wantRole {
				return
			}
			role := objs.get(t, "Role", roleName).(*rbacv1.Role)
			if role.Namespace != namespace+"-mps" {
				t.Errorf("Role namespace %q, want the MPS namespace %q", role.Namespace, namespace+"-mps")
			}
			if len(role.Rules) != 1 {
				t.Fatalf("Role rules %+v, want one rule on pods", role.Rules)
			}
			r := role.Rules[0]
			verbs := slices.Sorted(slices.Values(r.Verbs))
			if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"pods"}) ||
				!slices.Equal(verbs, []string{"create", "delete", "get"}) {
				t.Errorf("Role rule %+v, want get/create/delete on core pods only", r)
			}
			binding := objs.get(t, "RoleBinding", roleName).(*rbacv1.RoleBinding)
			if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != roleName || len(binding.Subjects) != 1 ||
				binding.Subjects[0].Name != pluginName || binding.Subjects[0].Namespace != namespace {
				t.Errorf("RoleBinding %+v, want the plugin's service account bound to %s", binding, roleName)
			}
		})
	}
}

func TestAdmissionPolicy(t *testing.T) {
	objs := render(t)
	vap := objs.get(t, "ValidatingAdmissionPolicy", "tangram-kubelet-plugin-own-node-slices").(*admissionv1.ValidatingAdmissionPolicy)
	wantUser := `request.userInfo.username == "system:serviceaccount:` + namespace + `:` + pluginName + `"`
	if len(vap.Spec.MatchConditions) != 1 || vap.Spec.MatchConditions[0].Expression != wantUser {
		t.Errorf("match conditions = %+v, want only %s", vap.Spec.MatchConditions, wantUser)
	}
	if vap.Spec.FailurePolicy == nil || *vap.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failure policy = %v, want Fail", vap.Spec.FailurePolicy)
	}
	rules := vap.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"resourceslices"}) ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
		t.Errorf("resource rules = %+v, want CREATE/UPDATE/DELETE of resourceslices", rules)
	}
	var exprs []string
	for _, v := range vap.Spec.Validations {
		exprs = append(exprs, v.Expression)
	}
	for _, want := range []string{
		"variables.userNodeName == variables.objectNodeName",
		"request.operation != 'UPDATE' || oldObject.spec.?nodeName.orValue('') == variables.userNodeName",
		`variables.slice.spec.driver == "gpu.tangram.dev"`,
		"variables.slice.spec.pool.name == variables.userNodeName",
	} {
		if !slices.Contains(exprs, want) {
			t.Errorf("validations %v lack %s", exprs, want)
		}
	}
	binding := objs.get(t, "ValidatingAdmissionPolicyBinding", vap.Name).(*admissionv1.ValidatingAdmissionPolicyBinding)
	if binding.Spec.PolicyName != vap.Name || !slices.Equal(binding.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding = %+v, want Deny for policy %s", binding.Spec, vap.Name)
	}

	if off := render(t, "admissionPolicy.enabled=false", "admissionPolicy.acknowledgeUnprotected=true", "kubeletPlugin.mps.daemon=process"); len(off["ValidatingAdmissionPolicy"]) != 0 {
		t.Errorf("admissionPolicy.enabled=false still renders a policy")
	}
}

func TestController(t *testing.T) {
	if objs := render(t); len(objs["Deployment"]) != 0 {
		t.Errorf("controller is rendered although controller.enabled defaults to false")
	}
	tests := []struct {
		replicas  string
		wantElect string
	}{
		{replicas: "1", wantElect: "false"},
		{replicas: "2", wantElect: "true"},
	}
	for _, tc := range tests {
		t.Run("replicas="+tc.replicas, func(t *testing.T) {
			objs := render(t, "controller.enabled=true", "controller.replicas="+tc.replicas)
			dep := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
			if got := *dep.Spec.Replicas; strconv.Itoa(int(got)) != tc.replicas {
				t.Errorf("replicas = %d, want %s", got, tc.replicas)
			}
			flags := flagValues(dep.Spec.Template.Spec.Containers[0].Args)
			if flags["leader-elect"] != tc.wantElect || flags["leader-elect-namespace"] != namespace {
				t.Errorf("leader election flags = %v, want leader-elect=%s in %s", flags, tc.wantElect, namespace)
			}
			if img := dep.Spec.Template.Spec.Containers[0].Image; img != "localhost/tangram/dra-controller:dev" {
				t.Errorf("controller image = %q", img)
			}
			objs.get(t, "Role", "tangram-controller-leader-election")
		})
	}

	// Host network (clusters whose pods reach the API server only there):
	// its own metrics port keeps it off a host-network plugin's.
	netTests := []struct {
		name        string
		sets        []string
		wantHostNet bool
		wantMetrics string
		wantEnv     map[string]string
	}{
		{name: "defaults", wantMetrics: "9400"},
		{
			name: "host network, own metrics port, API server on loopback",
			sets: []string{"controller.hostNetwork=true", "controller.metricsPort=9401",
				"controller.extraEnv[0].name=KUBERNETES_SERVICE_HOST", "controller.extraEnv[0].value=127.0.0.1"},
			wantHostNet: true, wantMetrics: "9401",
			wantEnv: map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1"},
		},
		{name: "global metrics port", sets: []string{"metrics.port=9500"}, wantMetrics: "9500"},
	}
	for _, tc := range netTests {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, append([]string{"controller.enabled=true"}, tc.sets...)...)
			pod := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment).Spec.Template
			c := pod.Spec.Containers[0]
			if pod.Spec.HostNetwork != tc.wantHostNet || (tc.wantHostNet && pod.Spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet) {
				t.Errorf("hostNetwork = %v dnsPolicy = %q, want hostNetwork %v", pod.Spec.HostNetwork, pod.Spec.DNSPolicy, tc.wantHostNet)
			}
			// On the host network the old replica holds the ports: no surge.
			dep := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
			if ru := dep.Spec.Strategy.RollingUpdate; tc.wantHostNet && (ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0) {
				t.Errorf("strategy %+v: a host-network controller must not surge", dep.Spec.Strategy)
			}
			var port string
			for _, p := range c.Ports {
				if p.Name == "metrics" {
					port = strconv.Itoa(int(p.ContainerPort))
				}
			}
			if got := flagValues(c.Args)["metrics-address"]; got != ":"+tc.wantMetrics || port != tc.wantMetrics ||
				pod.Annotations["prometheus.io/port"] != tc.wantMetrics {
				t.Errorf("metrics on %q, container port %q, scrape annotation %q; want %s everywhere",
					got, port, pod.Annotations["prometheus.io/port"], tc.wantMetrics)
			}
			for name, value := range tc.wantEnv {
				found := false
				for _, e := range c.Env {
					found = found || (e.Name == name && e.Value == value)
				}
				if !found {
					t.Errorf("env %s=%s missing from %+v", name, value, c.Env)
				}
			}
		})
	}

	// The webhook flags must name the Service and configuration the chart
	// renders, or the controller serves a certificate nobody asks for.
	objs := render(t, "controller.enabled=true", "controller.webhook.enabled=true", "controller.webhook.port=9555")
	dep := objs.get(t, "Deployment", "tangram-controller").(*appsv1.Deployment)
	flags := flagValues(dep.Spec.Template.Spec.Containers[0].Args)
	svc := objs.get(t, "Service", flags["webhook-service"]).(*corev1.Service)
	if svc.Spec.Ports[0].TargetPort.IntValue() != 9555 || flags["webhook-address"] != ":9555" {
		t.Errorf("webhook listens on %q but the Service targets %v", flags["webhook-address"], svc.Spec.Ports[0].TargetPort)
	}
	vwc := objs.get(t, "ValidatingWebhookConfiguration", flags["webhook-config-name"]).(*admissionv1.ValidatingWebhookConfiguration)
	if ref := vwc.Webhooks[0].ClientConfig.Service; ref == nil || ref.Name != svc.Name || ref.Namespace != namespace {
		t.Errorf("webhook configuration points at %+v, want Service %s/%s", ref, namespace, svc.Name)
	}
	if flags["webhook-namespace"] != namespace || flags["webhook-secret"] != "tangram-controller-webhook-tls" {
		t.Errorf("webhook flags = %v", flags)
	}
	if sel := vwc.Webhooks[0].NamespaceSelector; sel != nil {
		t.Errorf("by default the webhook checks every namespace, but it has namespaceSelector %+v", sel)
	}
}

// TestWebhookNamespaceSelector: controller.webhook.namespaceSelector limits
// the webhook to the namespaces it selects (the local test cluster makes it
// opt-in per namespace), and a selector that is not a label selector is
// refused at install.
func TestWebhookNamespaceSelector(t *testing.T) {
	on := []string{"controller.enabled=true", "controller.webhook.enabled=true"}
	objs := render(t, append(on, `controller.webhook.namespaceSelector@json={"matchLabels":{"tangram.dev/gpuconfig-webhook":"enabled"}}`)...)
	vwc := objs.get(t, "ValidatingWebhookConfiguration", "tangram-controller-gpuconfig").(*admissionv1.ValidatingWebhookConfiguration)
	sel := vwc.Webhooks[0].NamespaceSelector
	if sel == nil || len(sel.MatchLabels) != 1 || sel.MatchLabels["tangram.dev/gpuconfig-webhook"] != "enabled" {
		t.Errorf("namespaceSelector = %+v, want matchLabels tangram.dev/gpuconfig-webhook=enabled", sel)
	}
	if _, err := template(t, append(on, `controller.webhook.namespaceSelector@json={"matchLabel":{"a":"b"}}`)...); err == nil {
		t.Errorf("a namespaceSelector with an unknown field (matchLabel) was accepted")
	}
}

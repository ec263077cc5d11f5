//go:build helm

package helm

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const schedulerName = "tangram-scheduler"

// schedulerConfig is the part of kubescheduler.config.k8s.io/v1
// KubeSchedulerConfiguration the chart renders. The main module does not
// depend on k8s.io/kube-scheduler; decoding strictly into this mirror still
// catches a misspelt or misplaced field, and the real binary is checked once
// by hand (docs/placement.md).
type schedulerConfig struct {
	APIVersion     string `json:"apiVersion"`
	Kind           string `json:"kind"`
	LeaderElection struct {
		LeaderElect       *bool  `json:"leaderElect"`
		ResourceName      string `json:"resourceName"`
		ResourceNamespace string `json:"resourceNamespace"`
	} `json:"leaderElection"`
	Profiles []struct {
		SchedulerName string `json:"schedulerName"`
		Plugins       struct {
			PreScore           pluginSet `json:"preScore"`
			Score              pluginSet `json:"score"`
			Reserve            pluginSet `json:"reserve"`
			PostFilter         pluginSet `json:"postFilter"`
			PodGroupPostFilter pluginSet `json:"podGroupPostFilter"`
		} `json:"plugins"`
		PluginConfig []struct {
			Name string `json:"name"`
			Args struct {
				Policy string `json:"policy"`
			} `json:"args"`
		} `json:"pluginConfig"`
	} `json:"profiles"`
}

type pluginSet struct {
	Enabled []struct {
		Name   string `json:"name"`
		Weight *int32 `json:"weight,omitempty"`
	} `json:"enabled"`
}

// weightOf returns whether the set enables plugin name and its weight (0 if unset).
func (s pluginSet) weightOf(name string) (bool, int32) {
	for _, p := range s.Enabled {
		if p.Name == name {
			if p.Weight == nil {
				return true, 0
			}
			return true, *p.Weight
		}
	}
	return false, 0
}

// schedulerObjects returns the scheduler's Deployment, its only container and
// the KubeSchedulerConfiguration from the ConfigMap the pod mounts at the path
// --config names.
func schedulerObjects(t *testing.T, objs objects) (*appsv1.Deployment, corev1.Container, schedulerConfig) {
	t.Helper()
	dep := objs.get(t, "Deployment", schedulerName).(*appsv1.Deployment)
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("scheduler pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	configPath := flagValues(c.Args)["config"]
	var configMap string
	for _, m := range c.VolumeMounts {
		if rest, ok := strings.CutPrefix(configPath, m.MountPath+"/"); ok {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					configMap = v.ConfigMap.Name
					configPath = rest
				}
			}
		}
	}
	if configMap == "" {
		t.Fatalf("--config=%s is not in a mounted ConfigMap (mounts %+v)", flagValues(c.Args)["config"], c.VolumeMounts)
	}
	cm := objs.get(t, "ConfigMap", configMap).(*corev1.ConfigMap)
	text, ok := cm.Data[configPath]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", configMap, configPath)
	}
	var cfg schedulerConfig
	if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		t.Fatalf("KubeSchedulerConfiguration does not decode strictly: %v\n%s", err, text)
	}
	return dep, c, cfg
}

func TestSchedulerOffByDefault(t *testing.T) {
	objs := render(t)
	for _, kind := range []string{"Deployment", "ConfigMap", "ServiceAccount", "ClusterRoleBinding", "Role"} {
		for name := range objs[kind] {
			if strings.HasPrefix(name, schedulerName) {
				t.Errorf("%s %s is rendered although scheduler.enabled defaults to false", kind, name)
			}
		}
	}
}

func TestSchedulerDeployment(t *testing.T) {
	tests := []struct {
		name           string
		sets           []string
		wantImage      string
		wantReplicas   int32
		wantFlags      map[string]string
		wantProfile    string
		wantPolicy     string
		wantWeight     int32
		wantElect      bool
		wantSelector   map[string]string
		wantToleration string
		wantHostNet    bool
		wantEnv        map[string]string
		// wantNoPreemption: TangramPreemption is off and its RBAC absent.
		wantNoPreemption bool
	}{
		{
			name:         "defaults",
			sets:         []string{"scheduler.enabled=true"},
			wantImage:    "localhost/tangram/tangram-scheduler:dev",
			wantReplicas: 1,
			wantFlags:    map[string]string{"v": "2", "secure-port": "10259"},
			wantProfile:  "tangram", wantPolicy: "tangram", wantWeight: 5, wantElect: true,
		},
		{
			name: "every knob",
			sets: []string{"scheduler.enabled=true", "scheduler.policy=fgd", "scheduler.weight=20",
				"scheduler.schedulerName=gpu-packer", "scheduler.replicas=2", "scheduler.logVerbosity=5",
				"logVerbosity=1", "scheduler.securePort=10300", "image.tag=v3",
				"scheduler.image.repository=registry.example:5000/tangram/scheduler",
				"scheduler.extraArgs={--kube-api-qps=100}",
				"scheduler.nodeSelector.node-role\\.kubernetes\\.io/control-plane=",
				"scheduler.tolerations[0].key=node-role.kubernetes.io/control-plane",
				"scheduler.tolerations[0].operator=Exists",
				"scheduler.hostNetwork=true",
				"scheduler.extraEnv[0].name=KUBERNETES_SERVICE_HOST", "scheduler.extraEnv[0].value=127.0.0.1",
				"scheduler.preemption=false"},
			wantImage:    "registry.example:5000/tangram/scheduler:v3",
			wantReplicas: 2,
			wantFlags:    map[string]string{"v": "5", "secure-port": "10300", "kube-api-qps": "100"},
			wantProfile:  "gpu-packer", wantPolicy: "fgd", wantWeight: 20, wantElect: true,
			wantSelector:     map[string]string{"node-role.kubernetes.io/control-plane": ""},
			wantToleration:   "node-role.kubernetes.io/control-plane",
			wantHostNet:      true,
			wantEnv:          map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1"},
			wantNoPreemption: true,
		},
		{
			name:         "one replica without leader election, global verbosity",
			sets:         []string{"scheduler.enabled=true", "scheduler.leaderElection.enabled=false", "logVerbosity=4"},
			wantImage:    "localhost/tangram/tangram-scheduler:dev",
			wantReplicas: 1,
			wantFlags:    map[string]string{"v": "4"},
			wantProfile:  "tangram", wantPolicy: "tangram", wantWeight: 5, wantElect: false,
		},
		{
			name:         "quiet scheduler, verbose driver",
			sets:         []string{"scheduler.enabled=true", "scheduler.logVerbosity=0", "logVerbosity=6"},
			wantImage:    "localhost/tangram/tangram-scheduler:dev",
			wantReplicas: 1,
			wantFlags:    map[string]string{"v": "0"},
			wantProfile:  "tangram", wantPolicy: "tangram", wantWeight: 5, wantElect: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.sets...)
			dep, c, cfg := schedulerObjects(t, objs)
			if c.Image != tc.wantImage {
				t.Errorf("image = %q, want %q", c.Image, tc.wantImage)
			}
			if got := *dep.Spec.Replicas; got != tc.wantReplicas {
				t.Errorf("replicas = %d, want %d", got, tc.wantReplicas)
			}
			flags := flagValues(c.Args)
			for k, v := range tc.wantFlags {
				if got, ok := flags[k]; !ok || got != v {
					t.Errorf("flag --%s = %q (set %v), want %q; args %v", k, got, ok, v, c.Args)
				}
			}
			if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS ||
				p.HTTPGet.Port.String() != "https" || len(c.Ports) != 1 || c.Ports[0].Name != "https" ||
				strconv.Itoa(int(c.Ports[0].ContainerPort)) != flags["secure-port"] {
				t.Errorf("liveness probe %+v / ports %+v do not probe the secure port %s over HTTPS", p, c.Ports, flags["secure-port"])
			}
			if dep.Spec.Template.Spec.ServiceAccountName != schedulerName {
				t.Errorf("service account = %q, want %s", dep.Spec.Template.Spec.ServiceAccountName, schedulerName)
			}

			if cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || cfg.Kind != "KubeSchedulerConfiguration" {
				t.Errorf("config is %s %s", cfg.APIVersion, cfg.Kind)
			}
			le := cfg.LeaderElection
			if le.LeaderElect == nil || *le.LeaderElect != tc.wantElect {
				t.Errorf("leaderElect = %v, want %v", le.LeaderElect, tc.wantElect)
			}
			// Sharing the default scheduler's Lease would stop one of the two.
			if le.ResourceName == "kube-scheduler" || le.ResourceName == "" || le.ResourceNamespace != namespace {
				t.Errorf("leader election lock %s/%s, want its own Lease in %s", le.ResourceNamespace, le.ResourceName, namespace)
			}
			if len(cfg.Profiles) != 1 {
				t.Fatalf("config has %d profiles, want 1", len(cfg.Profiles))
			}
			prof := cfg.Profiles[0]
			if prof.SchedulerName != tc.wantProfile {
				t.Errorf("schedulerName = %q, want %q", prof.SchedulerName, tc.wantProfile)
			}
			if on, _ := prof.Plugins.PreScore.weightOf("TangramPacking"); !on {
				t.Errorf("TangramPacking is not enabled in preScore: %+v", prof.Plugins.PreScore)
			}
			if on, w := prof.Plugins.Score.weightOf("TangramPacking"); !on || w != tc.wantWeight {
				t.Errorf("TangramPacking in score: enabled %v weight %d, want weight %d", on, w, tc.wantWeight)
			}
			// Without Reserve the plugin would score the next pods without the
			// claims allocated for pods still binding.
			if on, _ := prof.Plugins.Reserve.weightOf("TangramPacking"); !on {
				t.Errorf("TangramPacking is not enabled in reserve: %+v", prof.Plugins.Reserve)
			}
			// GPU preemption runs after the stock DefaultPreemption (enabled
			// by default, so not listed), and only with its RBAC.
			on, _ := prof.Plugins.PostFilter.weightOf("TangramPreemption")
			if gang, _ := prof.Plugins.PodGroupPostFilter.weightOf("TangramPreemption"); gang != on {
				t.Errorf("TangramPreemption in podGroupPostFilter %v, in postFilter %v; want both or neither", gang, on)
			}
			_, hasRole := objs["ClusterRole"][schedulerName+"-preemption"]
			_, hasBinding := objs["ClusterRoleBinding"][schedulerName+"-preemption"]
			if on == tc.wantNoPreemption || hasRole == tc.wantNoPreemption || hasBinding == tc.wantNoPreemption {
				t.Errorf("TangramPreemption in postFilter %v, its ClusterRole %v and binding %v; want all %v",
					on, hasRole, hasBinding, !tc.wantNoPreemption)
			}
			if len(prof.PluginConfig) != 1 || prof.PluginConfig[0].Name != "TangramPacking" || prof.PluginConfig[0].Args.Policy != tc.wantPolicy {
				t.Errorf("pluginConfig = %+v, want TangramPacking with policy %s", prof.PluginConfig, tc.wantPolicy)
			}

			// The lease this replica may renew is the one the config names.
			role := objs.get(t, "Role", schedulerName+"-leader-election").(*rbacv1.Role)
			if !allows(role.Rules, "coordination.k8s.io", "leases", le.ResourceName, "update") ||
				!allows(role.Rules, "coordination.k8s.io", "leases", "", "create") {
				t.Errorf("leader-election Role %+v does not let it create and update Lease %s", role.Rules, le.ResourceName)
			}
			if role.Namespace != le.ResourceNamespace {
				t.Errorf("leader-election Role is in %s, the Lease in %s", role.Namespace, le.ResourceNamespace)
			}

			pod := dep.Spec.Template.Spec
			if len(tc.wantSelector) > 0 && !maps.Equal(pod.NodeSelector, tc.wantSelector) {
				t.Errorf("nodeSelector = %v, want %v", pod.NodeSelector, tc.wantSelector)
			}
			if tc.wantToleration != "" && (len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != tc.wantToleration) {
				t.Errorf("tolerations = %+v, want %s", pod.Tolerations, tc.wantToleration)
			}
			// On the host network the old replica holds the port: no surge.
			if ru := dep.Spec.Strategy.RollingUpdate; tc.wantHostNet && (ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0) {
				t.Errorf("strategy %+v: a host-network scheduler must not surge", dep.Spec.Strategy)
			}
			// A host-network pod resolves cluster names only with this DNS policy.
			if pod.HostNetwork != tc.wantHostNet || (tc.wantHostNet && pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet) {
				t.Errorf("hostNetwork = %v dnsPolicy = %q, want hostNetwork %v", pod.HostNetwork, pod.DNSPolicy, tc.wantHostNet)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if !maps.Equal(env, tc.wantEnv) {
				t.Errorf("env = %v, want %v", env, tc.wantEnv)
			}
		})
	}
}

func TestSchedulerRBAC(t *testing.T) {
	objs := render(t, "scheduler.enabled=true")
	subjectOK := func(subjects []rbacv1.Subject) bool {
		return len(subjects) == 1 && subjects[0].Kind == "ServiceAccount" &&
			subjects[0].Name == schedulerName && subjects[0].Namespace == namespace
	}
	objs.get(t, "ServiceAccount", schedulerName)

	// The stock scheduler's roles, exactly as the API server keeps them.
	bound := map[string]bool{}
	for name, obj := range objs["ClusterRoleBinding"] {
		b := obj.(*rbacv1.ClusterRoleBinding)
		if !strings.HasPrefix(name, schedulerName) {
			continue
		}
		if !subjectOK(b.Subjects) {
			t.Errorf("ClusterRoleBinding %s binds %+v, want only the scheduler's service account", name, b.Subjects)
		}
		bound[b.RoleRef.Name] = true
	}
	for _, role := range []string{"system:kube-scheduler", "system:volume-scheduler", schedulerName + "-dra"} {
		if !bound[role] {
			t.Errorf("ClusterRole %s is not bound to the scheduler (bound: %v)", role, bound)
		}
	}

	// What the DynamicResources plugin and TangramPacking read and write,
	// whether or not system:kube-scheduler carries the DRA rules.
	dra := objs.get(t, "ClusterRole", schedulerName+"-dra").(*rbacv1.ClusterRole)
	for _, need := range []struct{ resource, verb string }{
		{"resourceclaims", "get"}, {"resourceclaims", "list"}, {"resourceclaims", "watch"}, {"resourceclaims", "update"},
		{"resourceclaims/status", "update"}, {"resourceclaims/status", "patch"},
		{"resourceslices", "list"}, {"resourceslices", "watch"},
		{"deviceclasses", "list"}, {"deviceclasses", "watch"},
	} {
		if !allows(dra.Rules, "resource.k8s.io", need.resource, "", need.verb) {
			t.Errorf("scheduler may not %s %s", need.verb, need.resource)
		}
	}
	// Slices belong to the kubelet plugins; the scheduler never writes them.
	for _, verb := range []string{"create", "update", "delete"} {
		if allows(dra.Rules, "resource.k8s.io", "resourceslices", "", verb) {
			t.Errorf("scheduler may %s resourceslices", verb)
		}
	}
	for _, r := range dra.Rules {
		for _, s := range slices.Concat(r.Verbs, r.Resources, r.APIGroups) {
			if s == "*" {
				t.Errorf("scheduler DRA ClusterRole has a wildcard rule %+v", r)
			}
		}
	}

	// Preemption evicts, and may do nothing else beyond the stock roles.
	pre := objs.get(t, "ClusterRole", schedulerName+"-preemption").(*rbacv1.ClusterRole)
	if !allows(pre.Rules, "", "pods/eviction", "", "create") {
		t.Errorf("scheduler may not create pods/eviction: %+v", pre.Rules)
	}
	if len(pre.Rules) != 1 || len(pre.Rules[0].Verbs) != 1 || len(pre.Rules[0].Resources) != 1 {
		t.Errorf("preemption ClusterRole grants more than creating evictions: %+v", pre.Rules)
	}
	if b := objs.get(t, "ClusterRoleBinding", schedulerName+"-preemption").(*rbacv1.ClusterRoleBinding); b.RoleRef.Name != pre.Name || !subjectOK(b.Subjects) {
		t.Errorf("preemption binding = %+v %+v", b.RoleRef, b.Subjects)
	}

	// Delegated authentication of the secure port.
	auth := objs.get(t, "RoleBinding", schedulerName+"-auth-reader").(*rbacv1.RoleBinding)
	if auth.Namespace != "kube-system" || auth.RoleRef.Kind != "Role" ||
		auth.RoleRef.Name != "extension-apiserver-authentication-reader" || !subjectOK(auth.Subjects) {
		t.Errorf("auth reader binding = %s/%+v %+v", auth.Namespace, auth.RoleRef, auth.Subjects)
	}
	le := objs.get(t, "RoleBinding", schedulerName+"-leader-election").(*rbacv1.RoleBinding)
	if le.Namespace != namespace || le.RoleRef.Name != schedulerName+"-leader-election" || !subjectOK(le.Subjects) {
		t.Errorf("leader-election binding = %s/%+v %+v", le.Namespace, le.RoleRef, le.Subjects)
	}
}

func TestSchedulerSchemaRejects(t *testing.T) {
	tests := []struct {
		name    string
		sets    []string
		wantErr []string
	}{
		{name: "unknown policy", sets: []string{"scheduler.policy=spread"}, wantErr: []string{"scheduler", "policy"}},
		{name: "unknown key", sets: []string{"scheduler.profile=tangram"}, wantErr: []string{"scheduler", "profile"}},
		{name: "enabled as a string", sets: []string{"scheduler.enabled=yes"}, wantErr: []string{"scheduler", "enabled"}},
		{name: "weight zero", sets: []string{"scheduler.weight=0"}, wantErr: []string{"weight"}},
		{name: "weight above 100", sets: []string{"scheduler.weight=101"}, wantErr: []string{"weight"}},
		{name: "scheduler name with capitals", sets: []string{"scheduler.schedulerName=Tangram"}, wantErr: []string{"schedulerName"}},
		{name: "no replicas", sets: []string{"scheduler.replicas=0"}, wantErr: []string{"replicas"}},
		{name: "two replicas without leader election",
			sets: []string{"scheduler.replicas=2", "scheduler.leaderElection.enabled=false"}, wantErr: []string{"leaderElection"}},
		{name: "verbosity out of range", sets: []string{"scheduler.logVerbosity=11"}, wantErr: []string{"logVerbosity"}},
		{name: "repository with a tag", sets: []string{"scheduler.image.repository=foo/bar:v1"}, wantErr: []string{"repository"}},
		{name: "secure port", sets: []string{"scheduler.securePort=0"}, wantErr: []string{"securePort"}},
		{name: "extra arg that is not a flag", sets: []string{"scheduler.extraArgs={oops}"}, wantErr: []string{"extraArgs"}},
		{name: "preemption as a string", sets: []string{"scheduler.preemption=yes"}, wantErr: []string{"preemption"}},
		{name: "hostNetwork as a string", sets: []string{"scheduler.hostNetwork=yes"}, wantErr: []string{"hostNetwork"}},
		{name: "env without a name", sets: []string{"scheduler.extraEnv[0].value=x"}, wantErr: []string{"extraEnv"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sets := append([]string{"scheduler.enabled=true"}, tc.sets...)
			out, err := template(t, sets...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want a schema error; rendered %d bytes", sets, len(out))
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") {
				t.Errorf("not a schema error: %s", msg)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not mention %q: %s", w, msg)
				}
			}
		})
	}
}

// allows reports whether rules grant verb on group/resource; an empty name
// asks for a rule not limited to resource names.
func allows(rules []rbacv1.PolicyRule, group, resource, name, verb string) bool {
	for _, r := range rules {
		if !slices.Contains(r.APIGroups, group) || !slices.Contains(r.Resources, resource) || !slices.Contains(r.Verbs, verb) {
			continue
		}
		if len(r.ResourceNames) == 0 || (name != "" && slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

func TestSchedulerLint(t *testing.T) {
	args := append([]string{"lint", "--strict", chartDir, "--namespace", namespace},
		setArgs([]string{"scheduler.enabled=true", "scheduler.replicas=2", "scheduler.policy=best-fit"})...)
	if out, err := runHelm(t, args...); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
}

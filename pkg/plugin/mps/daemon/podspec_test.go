package daemon

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
)

func basePodConfig(root string) PodSpec {
	return PodSpec{
		Prefix:         "tangram",
		Namespace:      "tangram-system",
		NodeName:       "node-1",
		NodeUID:        "node-uid-1",
		PodImage:       PodImage{Image: "registry.example/tangram/dra-kubelet-plugin:v1", ImagePullPolicy: corev1.PullIfNotPresent},
		Command:        []string{"/dra-kubelet-plugin", "mps-daemon"},
		Layout:         Layout{Root: root},
		VisibleDevices: []string{"GPU-a", "GPU-b"},
		ControlBinary:  "nvidia-cuda-mps-control",
		// What the plugin's flag defaults to.
		PriorityClassName: "system-node-critical",
	}
}

func mountsOf(pod *corev1.Pod) map[string]string {
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	out := map[string]string{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		out[m.MountPath] = hostPaths[m.Name]
	}
	return out
}

func TestBuildDaemonPod(t *testing.T) {
	long := strings.Repeat("n", 250)
	for _, tc := range []struct {
		name    string
		mutate  func(*PodSpec)
		wantErr string
		check   func(t *testing.T, pod *corev1.Pod)
	}{
		{
			name: "real GPUs, multi-user, driver root",
			mutate: func(c *PodSpec) {
				c.MultiUser = true
				c.DriverRoot = "/run/nvidia/driver"
				c.ImagePullSecrets = []string{"regcred"}
			},
			check: func(t *testing.T, pod *corev1.Pod) {
				c := pod.Spec.Containers[0]
				if got, want := strings.Join(c.Command, " "), "/dra-kubelet-plugin mps-daemon --mps-control-binary=nvidia-cuda-mps-control --mps-multi-user"; got != want {
					t.Errorf("command %q, want %q", got, want)
				}
				if got := mountsOf(pod)["/driver-root"]; got != "/run/nvidia/driver" {
					t.Errorf("/driver-root from %q, want the host driver root", got)
				}
				if ps := pod.Spec.ImagePullSecrets; len(ps) != 1 || ps[0].Name != "regcred" {
					t.Errorf("image pull secrets %v, want regcred", ps)
				}
				if envOf(c)["NVIDIA_DRIVER_ROOT"] != "/driver-root" {
					t.Errorf("NVIDIA_DRIVER_ROOT not set: %v", c.Env)
				}
			},
		},
		{
			name:   "simulated: no driver root, stand-in flag only",
			mutate: func(c *PodSpec) { c.Simulate = true; c.MultiUser = true },
			check: func(t *testing.T, pod *corev1.Pod) {
				c := pod.Spec.Containers[0]
				if got, want := strings.Join(c.Command, " "), "/dra-kubelet-plugin mps-daemon --simulate"; got != want {
					t.Errorf("command %q, want %q", got, want)
				}
				if _, ok := mountsOf(pod)["/driver-root"]; ok {
					t.Error("a simulated daemon must not mount a driver root")
				}
			},
		},
		{
			name: "common shape",
			check: func(t *testing.T, pod *corev1.Pod) {
				if pod.Name != "tangram-mps-node-1" || pod.Namespace != "tangram-system" {
					t.Errorf("pod %s/%s, want tangram-system/tangram-mps-node-1", pod.Namespace, pod.Name)
				}
				s := pod.Spec
				if s.NodeName != "node-1" || s.SchedulerName != "" {
					t.Errorf("nodeName %q schedulerName %q: want pinned to node-1 without a scheduler", s.NodeName, s.SchedulerName)
				}
				if len(s.Tolerations) != 1 || s.Tolerations[0].Operator != corev1.TolerationOpExists || s.Tolerations[0].Key != "" {
					t.Errorf("tolerations %v, want tolerate-all", s.Tolerations)
				}
				if s.PriorityClassName != "system-node-critical" || s.RestartPolicy != corev1.RestartPolicyAlways {
					t.Errorf("priority %q restart %q", s.PriorityClassName, s.RestartPolicy)
				}
				// The host's PIDs (the driver registers MPS clients by
				// host PID), and no other host namespace.
				if !s.HostPID || s.HostNetwork || s.HostIPC {
					t.Errorf("hostPID %v hostNetwork %v hostIPC %v, want only hostPID", s.HostPID, s.HostNetwork, s.HostIPC)
				}
				c := s.Containers[0]
				if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
					t.Error("container not privileged")
				}
				if c.Image != "registry.example/tangram/dra-kubelet-plugin:v1" || c.ImagePullPolicy != corev1.PullIfNotPresent {
					t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
				}
				want := map[string]string{"/r/pipe": "/r/pipe", "/r/log": "/r/log", "/dev/shm": "/r/shm"}
				got := mountsOf(pod)
				for path, host := range want {
					if got[path] != host {
						t.Errorf("mount %s from %q, want host path %q (all mounts %v)", path, got[path], host, got)
					}
				}
				env := envOf(c)
				if env["CUDA_MPS_PIPE_DIRECTORY"] != "/r/pipe" || env["CUDA_MPS_LOG_DIRECTORY"] != "/r/log" || env["CUDA_VISIBLE_DEVICES"] != "GPU-a,GPU-b" {
					t.Errorf("MPS environment %v", env)
				}
				if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "Node" || pod.OwnerReferences[0].Name != "node-1" ||
					pod.OwnerReferences[0].UID != "node-uid-1" || pod.OwnerReferences[0].BlockOwnerDeletion != nil {
					t.Errorf("owner references %+v, want the Node without blockOwnerDeletion", pod.OwnerReferences)
				}
				if pod.Labels[LabelComponent] != DaemonComponent || pod.Labels[LabelNode] != "node-1" {
					t.Errorf("labels %v", pod.Labels)
				}
			},
		},
		{
			name:   "long node name is cut to a valid, distinct name",
			mutate: func(c *PodSpec) { c.NodeName = long },
			check: func(t *testing.T, pod *corev1.Pod) {
				if len(pod.Name) > 253 || !strings.HasPrefix(pod.Name, "tangram-mps-nnn") {
					t.Errorf("name %q (%d characters)", pod.Name, len(pod.Name))
				}
				if other := PodName("tangram", long+"x"); other == pod.Name {
					t.Error("two long node names give the same pod name")
				}
				if v := pod.Labels[LabelNode]; len(v) > 63 {
					t.Errorf("node label %q longer than 63", v)
				}
			},
		},
		{
			name:   "no priority class",
			mutate: func(c *PodSpec) { c.PriorityClassName = "" },
			check: func(t *testing.T, pod *corev1.Pod) {
				if p := pod.Spec.PriorityClassName; p != "" {
					t.Errorf("priority class %q, want none", p)
				}
			},
		},
		{
			name:   "custom priority class",
			mutate: func(c *PodSpec) { c.PriorityClassName = "gpu-infra" },
			check: func(t *testing.T, pod *corev1.Pod) {
				if p := pod.Spec.PriorityClassName; p != "gpu-infra" {
					t.Errorf("priority class %q, want gpu-infra", p)
				}
			},
		},
		{name: "no image", mutate: func(c *PodSpec) { c.Image = "" }, wantErr: "image are required"},
		{name: "no command", mutate: func(c *PodSpec) { c.Command = nil }, wantErr: "command is required"},
		{name: "no MPS root", mutate: func(c *PodSpec) { c.Layout.Root = "" }, wantErr: "MPS root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := basePodConfig("/r")
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			pod, err := BuildPod(cfg)
			if mpstest.CheckError(t, err, tc.wantErr) {
				return
			}
			tc.check(t, pod)
		})
	}
}

package daemon

// The MPS daemon pod (--mps-daemon=pod) as the plugin builds it; the
// chart's admission policy admits exactly these pods.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Labels of the MPS daemon pod. The component differs from the plugin's, so
// that selecting the plugin's pods never selects the daemon.
const (
	LabelComponent      = "app.kubernetes.io/component"
	DaemonComponent     = "mps-daemon"
	LabelNode           = "gpu.tangram.dev/node"
	mpsDaemonContainer  = "mps-control-daemon"
	podDriverRootMount  = "/driver-root"
	maxPodNameLength    = 253
	defaultPodStartWait = 90 * time.Second
)

// PodSpec describes the daemon pod; BuildPod turns it
// into a Pod object.
type PodSpec struct {
	// Prefix names the pod <Prefix>-mps-<NodeName>, e.g. the release name.
	Prefix    string
	Namespace string
	NodeName  string
	// NodeUID makes the Node the pod's owner: the pod is garbage collected
	// with its node.
	NodeUID string
	// PodImage is the image the pod runs and how it is pulled.
	PodImage
	// Command runs the daemon in the image (PodCommand); flags are
	// appended.
	Command []string
	Layout  Layout
	// VisibleDevices are the shareable cards' UUIDs (CUDA_VISIBLE_DEVICES).
	VisibleDevices []string
	// ControlBinary is nvidia-cuda-mps-control as the pod finds it.
	ControlBinary string
	MultiUser     bool
	// Protocol 3 runs the daemon as MPS v3 (CUDA_MPS_PROTOCOL_VERSION=3).
	Protocol int
	// Simulate runs the stand-in daemon (fake GPUs).
	Simulate bool
	// DriverRoot is the host's NVIDIA driver root, mounted read-only at
	// /driver-root like the plugin has it; empty for none (fake GPUs).
	DriverRoot string
	// PriorityClassName of the pod, e.g. system-node-critical; empty for
	// none (the plugin's flag has the default, so the chart can pass its
	// own value, empty included).
	PriorityClassName string
}

// PodImage is the daemon pod's image: the plugin's own.
type PodImage struct {
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets name secrets of the pod's namespace, as the
	// plugin's pod has.
	ImagePullSecrets []string
}

// PodName returns <prefix>-mps-<node>; a name longer than a pod
// name may be is cut and ends in a hash of the full name, so that two long
// node names still get different pods.
func PodName(prefix, node string) string {
	name := prefix + "-mps-" + node
	if len(name) <= maxPodNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:maxPodNameLength-len(suffix)], "-.") + suffix
}

// PodCommand runs the daemon in the plugin's image (the chart's
// command is the same binary). The chart's daemon-pod admission policy
// allows exactly this command followed by the words BuildPod
// appends (the DaemonFlag constants), and nothing else.
var PodCommand = []string{"/dra-kubelet-plugin", "mps-daemon"}

// The words BuildPod appends to the command.
const (
	DaemonFlagSimulate      = "--simulate"
	DaemonFlagMultiUser     = "--mps-multi-user"
	DaemonFlagControlBinary = "--mps-control-binary="
)

// BuildPod returns the pod that runs the node's MPS control daemon.
// It is pinned with spec.nodeName (no scheduler: it must run on this node,
// even one the scheduler would refuse) and tolerates every taint.
func BuildPod(cfg PodSpec) (*corev1.Pod, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	args := cfg.args()
	volumes, mounts, env := cfg.storageAndEnv()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      PodName(cfg.Prefix, cfg.NodeName),
			Namespace: cfg.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "tangram",
				LabelComponent:                 DaemonComponent,
				"app.kubernetes.io/managed-by": "tangram-dra-kubelet-plugin",
				LabelNode:                      labelValue(cfg.NodeName),
			},
		},
		Spec: corev1.PodSpec{
			NodeName:                     cfg.NodeName,
			RestartPolicy:                corev1.RestartPolicyAlways,
			PriorityClassName:            cfg.PriorityClassName,
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// The host's PID namespace: the driver accounts an MPS
			// client by its host PID, and a daemon in a PID namespace of
			// its own cannot register its clients, so per-cgroup memory
			// limits go unenforced (NVIDIA's field reports; NVIDIA's DRA
			// driver runs its daemon so too). The chart's admission
			// policy allows this, and nothing else of the host's.
			HostPID: true,
			// SIGTERM makes the daemon runner send quit; give it time.
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers: []corev1.Container{{
				Name:            mpsDaemonContainer,
				Image:           cfg.Image,
				ImagePullPolicy: cfg.ImagePullPolicy,
				Command:         append(append([]string(nil), cfg.Command...), args...),
				Env:             env,
				VolumeMounts:    mounts,
				// Privileged for the card's device nodes, as the plugin.
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
			Volumes: volumes,
		},
	}
	for _, name := range cfg.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	if cfg.NodeUID != "" {
		// No blockOwnerDeletion: that would need update on nodes/finalizers.
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: cfg.NodeName, UID: types.UID(cfg.NodeUID),
		}}
	}
	return pod, nil
}

// validate says which required field of the daemon pod is missing.
func (cfg PodSpec) validate() error {
	switch {
	case cfg.Prefix == "", cfg.Namespace == "", cfg.NodeName == "", cfg.Image == "":
		return fmt.Errorf("MPS daemon pod: prefix, namespace, node name and image are required (got %q, %q, %q, %q)",
			cfg.Prefix, cfg.Namespace, cfg.NodeName, cfg.Image)
	case len(cfg.Command) == 0:
		return errors.New("MPS daemon pod: command is required")
	case cfg.Layout.Root == "":
		return errors.New("MPS daemon pod: the MPS root is required")
	}
	return nil
}

// args are the words BuildPod appends to the pod's command.
func (cfg PodSpec) args() []string {
	args := []string{}
	if cfg.Simulate {
		args = append(args, DaemonFlagSimulate)
	} else {
		if cfg.ControlBinary != "" {
			args = append(args, DaemonFlagControlBinary+cfg.ControlBinary)
		}
		if cfg.MultiUser {
			args = append(args, DaemonFlagMultiUser)
		}
	}
	return args
}

// storageAndEnv are the daemon container's host directories, their
// mounts, and its MPS environment.
func (cfg PodSpec) storageAndEnv() ([]corev1.Volume, []corev1.VolumeMount, []corev1.EnvVar) {
	hostDir := corev1.HostPathDirectoryOrCreate
	volumes := []corev1.Volume{
		{Name: "mps-pipe", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: cfg.Layout.PipeDir(), Type: &hostDir}}},
		{Name: "mps-log", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: cfg.Layout.LogDir(), Type: &hostDir}}},
		{Name: "mps-shm", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: cfg.Layout.ShmDir(), Type: &hostDir}}},
	}
	// The pipe directory keeps its host path (CDI mounts and
	// CUDA_MPS_PIPE_DIRECTORY name it); <mps-root>/shm becomes the daemon's
	// own /dev/shm (shares' containers have their claim's).
	mounts := []corev1.VolumeMount{
		{Name: "mps-pipe", MountPath: cfg.Layout.PipeDir()},
		{Name: "mps-log", MountPath: cfg.Layout.LogDir()},
		{Name: "mps-shm", MountPath: "/dev/shm"},
	}
	env := []corev1.EnvVar{
		{Name: "CUDA_MPS_PIPE_DIRECTORY", Value: cfg.Layout.PipeDir()},
		{Name: "CUDA_MPS_LOG_DIRECTORY", Value: cfg.Layout.LogDir()},
		{Name: "CUDA_VISIBLE_DEVICES", Value: strings.Join(cfg.VisibleDevices, ",")},
	}
	if cfg.Protocol == 3 {
		env = append(env, corev1.EnvVar{Name: "CUDA_MPS_PROTOCOL_VERSION", Value: "3"})
	}
	if cfg.DriverRoot != "" {
		hostExisting := corev1.HostPathDirectory
		volumes = append(volumes, corev1.Volume{Name: "driver-root", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: cfg.DriverRoot, Type: &hostExisting}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "driver-root", MountPath: podDriverRootMount, ReadOnly: true})
		env = append(env, corev1.EnvVar{Name: "NVIDIA_DRIVER_ROOT", Value: podDriverRootMount})
	}
	return volumes, mounts, env
}

// labelValue fits a node name into a label value (63 characters).
func labelValue(s string) string {
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return strings.TrimRight(s[:52], "-._") + "-" + hex.EncodeToString(sum[:])[:10]
}

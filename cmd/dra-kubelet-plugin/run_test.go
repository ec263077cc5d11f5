package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestMPSDaemonPodFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flags      runFlags
		namespace  string
		fake       bool
		wantErr    string
		wantDriver string
		wantImage  string
		wantPrio   string
		// wantNamespace defaults to namespace ($POD_NAMESPACE).
		wantNamespace string
	}{
		{name: "process mode needs nothing", flags: runFlags{MPSDaemon: "process"}},
		{name: "unknown mode", flags: runFlags{MPSDaemon: "daemonset"}, wantErr: "want process or pod"},
		{name: "pod mode without image", flags: runFlags{MPSDaemon: "pod", MPSDaemonPull: "IfNotPresent"}, namespace: "ns", wantErr: "--mps-daemon-image"},
		{name: "pod mode without namespace", flags: runFlags{MPSDaemon: "pod", MPSDaemonImage: "img", MPSDaemonPull: "IfNotPresent"}, wantErr: "POD_NAMESPACE"},
		{
			name:      "namespace of its own beats the plugin's",
			flags:     runFlags{MPSDaemon: "pod", MPSDaemonImage: "img:v1", MPSDaemonPull: "Never", MPSDaemonPrefix: "rel", MPSDaemonNamespace: "ns-mps"},
			namespace: "ns", fake: true, wantImage: "img:v1", wantNamespace: "ns-mps",
		},
		{name: "kube-system", flags: runFlags{MPSDaemon: "pod", MPSDaemonImage: "img", MPSDaemonPull: "Never", MPSDaemonNamespace: "kube-system"},
			namespace: "ns", wantErr: "--mps-daemon-namespace=kube-system: the MPS daemon pod may not live in a kube-* namespace"},
		{name: "kube-node-lease", flags: runFlags{MPSDaemon: "pod", MPSDaemonImage: "img", MPSDaemonPull: "Never", MPSDaemonNamespace: "kube-node-lease"},
			namespace: "ns", wantErr: "kube-* namespace"},
		{name: "a plugin in kube-system without a namespace flag", flags: runFlags{MPSDaemon: "pod", MPSDaemonImage: "img", MPSDaemonPull: "Never"},
			namespace: "kube-system", wantErr: "$POD_NAMESPACE=kube-system: the MPS daemon pod may not live in a kube-* namespace"},
		{name: "bad pull policy", flags: runFlags{MPSDaemon: "pod", MPSDaemonImage: "img", MPSDaemonPull: "Sometimes"}, namespace: "ns", wantErr: "pull-policy"},
		{
			name:      "real GPUs: driver root passed on",
			flags:     runFlags{MPSDaemon: "pod", MPSDaemonImage: "img:v1", MPSDaemonPull: "Always", MPSDaemonPrefix: "rel", MPSDaemonDriver: "/run/nvidia/driver", MPSDaemonPrio: "system-node-critical"},
			namespace: "ns", wantDriver: "/run/nvidia/driver", wantImage: "img:v1", wantPrio: "system-node-critical",
		},
		{
			name:      "real GPUs: host driver root by default",
			flags:     runFlags{MPSDaemon: "pod", MPSDaemonImage: "img:v1", MPSDaemonPull: "Always", MPSDaemonPrefix: "rel", HostDriverRoot: "/var/lib/mock-driver", MPSDaemonPrio: "p"},
			namespace: "ns", wantDriver: "/var/lib/mock-driver", wantImage: "img:v1", wantPrio: "p",
		},
		{
			name:      "real GPUs: --driver-root when nothing else is set",
			flags:     runFlags{MPSDaemon: "pod", MPSDaemonImage: "img:v1", MPSDaemonPull: "Always", MPSDaemonPrefix: "rel"},
			namespace: "ns", wantDriver: "/", wantImage: "img:v1",
		},
		{
			name:      "fake GPUs: no driver root",
			flags:     runFlags{MPSDaemon: "pod", MPSDaemonImage: "img:v1", MPSDaemonPull: "Never", MPSDaemonPrefix: "rel", MPSDaemonDriver: "/"},
			namespace: "ns", fake: true, wantImage: "img:v1",
		},
		{
			name:      "no priority class",
			flags:     runFlags{MPSDaemon: "pod", MPSDaemonImage: "img:v1", MPSDaemonPull: "Never", MPSDaemonPrefix: "rel", MPSDaemonPrio: ""},
			namespace: "ns", fake: true, wantImage: "img:v1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.namespace)
			cfg, err := tc.flags.mpsDaemonPod(tc.fake, "/")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Image != tc.wantImage || cfg.DriverRoot != tc.wantDriver {
				t.Errorf("image %q driver root %q, want %q %q", cfg.Image, cfg.DriverRoot, tc.wantImage, tc.wantDriver)
			}
			if tc.wantImage != "" {
				wantNamespace := tc.wantNamespace
				if wantNamespace == "" {
					wantNamespace = tc.namespace
				}
				if cfg.Namespace != wantNamespace || cfg.Prefix != "rel" || cfg.ImagePullPolicy != corev1.PullPolicy(tc.flags.MPSDaemonPull) ||
					strings.Join(cfg.Command, " ") != "/dra-kubelet-plugin mps-daemon" {
					t.Errorf("pod config %+v", cfg)
				}
			}
			if cfg.PriorityClassName != tc.wantPrio {
				t.Errorf("priority class %q, want %q", cfg.PriorityClassName, tc.wantPrio)
			}
		})
	}
}

// The flag defaults to system-node-critical; the chart may pass it empty
// (kubeletPlugin.priorityClassName: "") for a pod without a priority class.
func TestMPSDaemonPriorityClassFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: nil, want: "system-node-critical"},
		{args: []string{"--mps-daemon-priority-class="}, want: ""},
		{args: []string{"--mps-daemon-priority-class=gpu-infra"}, want: "gpu-infra"},
	} {
		f := newRunCommand().Flags()
		if err := f.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, err := f.GetString("mps-daemon-priority-class"); err != nil || got != tc.want {
			t.Errorf("%v: --mps-daemon-priority-class %q (%v), want %q", tc.args, got, err, tc.want)
		}
	}
}

// Multi-user is the default: without -M a classic daemon serves one UID at
// a time, and on a GPU (r580) a uid 1000 client waited for a root client
// to exit (docs/gpu-reports/2026-11-27-h200-r580-experiments.md);
// --mps-multi-user=false (chart kubeletPlugin.mps.multiUser=false) for a
// driver whose control binary refuses -M.
func TestMPSMultiUserFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{args: nil, want: true},
		{args: []string{"--mps-multi-user=false"}, want: false},
		{args: []string{"--mps-multi-user"}, want: true},
	} {
		f := newRunCommand().Flags()
		if err := f.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, err := f.GetBool("mps-multi-user"); err != nil || got != tc.want {
			t.Errorf("%v: --mps-multi-user %v (%v), want %v", tc.args, got, err, tc.want)
		}
	}
}

// The daemon pod finds the driver's nvidia-cuda-mps-control under the
// driver root it has mounted, and says where it looked when it is missing.
func TestMPSDaemonCommandFindsControlBinary(t *testing.T) {
	root := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", filepath.Join(t.TempDir(), "pipe"))
	_, err := runCommand(t, "mps-daemon", "--driver-root", root)
	for _, want := range []string{"nvidia-cuda-mps-control not found under the NVIDIA driver root " + root, filepath.Join(root, "usr/bin/nvidia-cuda-mps-control"), "--mps-control-binary"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	t.Setenv("NVIDIA_DRIVER_ROOT", "/driver-root")
	f := newMPSDaemonCommand().Flags()
	if got, _ := f.GetString("driver-root"); got != "/driver-root" {
		t.Errorf("--driver-root defaults to %q, want $NVIDIA_DRIVER_ROOT", got)
	}
}

// TestMPSSizeFlags: a size or duration that makes no sense is refused at
// start-up with the flag's name, before anything touches the node; a
// negative /dev/shm size would otherwise leave each claim's /dev/shm
// without a bound.
func TestMPSSizeFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		shm       string
		idle      time.Duration
		wantBytes int64
		wantErr   string
	}{
		{name: "defaults", shm: "8Gi", idle: 5 * time.Minute, wantBytes: 8 << 30},
		{name: "0: plain directories", shm: "0", wantBytes: 0},
		{name: "negative shm size", shm: "-64Mi", wantErr: "--mps-shm-size=-64Mi is negative"},
		{name: "shm size in words", shm: "64 megabytes", wantErr: "--mps-shm-size=64 megabytes: want a size such as 64Mi"},
		{name: "negative idle grace", shm: "64Mi", idle: -time.Second, wantErr: "--mps-idle-grace=-1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := runFlags{MPSShmSize: tc.shm, MPSIdleGrace: tc.idle}
			got, err := f.mpsShmSizeBytes()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.wantBytes {
				t.Fatalf("got %d, %v; want %d", got, err, tc.wantBytes)
			}
		})
	}
}

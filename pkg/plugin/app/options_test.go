package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/xidtaint"
)

func TestMPSDaemonPodFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		flags      Options
		namespace  string
		fake       bool
		wantErr    string
		wantDriver string
		wantImage  string
		wantPrio   string
		// wantNamespace defaults to namespace ($POD_NAMESPACE).
		wantNamespace string
	}{
		{name: "process mode needs nothing", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "process"}}},
		{name: "unknown mode", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "daemonset"}}, wantErr: "want process or pod"},
		{name: "pod mode without image", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonPull: "IfNotPresent"}}}, namespace: "ns", wantErr: "--mps-daemon-image"},
		{name: "pod mode without namespace", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img", MPSDaemonPull: "IfNotPresent"}}}, wantErr: "POD_NAMESPACE"},
		{
			name:      "namespace of its own beats the plugin's",
			flags:     Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img:v1", MPSDaemonPull: "Never", MPSDaemonPrefix: "rel", MPSDaemonNamespace: "ns-mps"}}},
			namespace: "ns", fake: true, wantImage: "img:v1", wantNamespace: "ns-mps",
		},
		{name: "kube-system", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img", MPSDaemonPull: "Never", MPSDaemonNamespace: "kube-system"}}},
			namespace: "ns", wantErr: "--mps-daemon-namespace=kube-system: the MPS daemon pod may not live in a kube-* namespace"},
		{name: "kube-node-lease", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img", MPSDaemonPull: "Never", MPSDaemonNamespace: "kube-node-lease"}}},
			namespace: "ns", wantErr: "kube-* namespace"},
		{name: "a plugin in kube-system without a namespace flag", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img", MPSDaemonPull: "Never"}}},
			namespace: "kube-system", wantErr: "$POD_NAMESPACE=kube-system: the MPS daemon pod may not live in a kube-* namespace"},
		{name: "bad pull policy", flags: Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img", MPSDaemonPull: "Sometimes"}}}, namespace: "ns", wantErr: "pull-policy"},
		{
			name:      "real GPUs: driver root passed on",
			flags:     Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img:v1", MPSDaemonPull: "Always", MPSDaemonPrefix: "rel", MPSDaemonDriver: "/run/nvidia/driver", MPSDaemonPrio: "system-node-critical"}}},
			namespace: "ns", wantDriver: "/run/nvidia/driver", wantImage: "img:v1", wantPrio: "system-node-critical",
		},
		{
			name:      "real GPUs: host driver root by default",
			flags:     Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img:v1", MPSDaemonPull: "Always", MPSDaemonPrefix: "rel", MPSDaemonPrio: "p"}}, HostOptions: HostOptions{HostDriverRoot: "/var/lib/mock-driver"}},
			namespace: "ns", wantDriver: "/var/lib/mock-driver", wantImage: "img:v1", wantPrio: "p",
		},
		{
			name:      "real GPUs: --driver-root when nothing else is set",
			flags:     Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img:v1", MPSDaemonPull: "Always", MPSDaemonPrefix: "rel"}}},
			namespace: "ns", wantDriver: "/", wantImage: "img:v1",
		},
		{
			name:      "fake GPUs: no driver root",
			flags:     Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img:v1", MPSDaemonPull: "Never", MPSDaemonPrefix: "rel", MPSDaemonDriver: "/"}}},
			namespace: "ns", fake: true, wantImage: "img:v1",
		},
		{
			name:      "no priority class",
			flags:     Options{MPSOptions: MPSOptions{MPSDaemonMode: "pod", MPSDaemonPodOptions: MPSDaemonPodOptions{MPSDaemonImage: "img:v1", MPSDaemonPull: "Never", MPSDaemonPrefix: "rel", MPSDaemonPrio: ""}}},
			namespace: "ns", fake: true, wantImage: "img:v1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", tc.namespace)
			cfg, err := tc.flags.mpsDaemonPod(tc.fake, tc.flags.HostDriverRootOf("/").HostPath)
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
		{name: "defaults", shm: DefaultMPSShmSize, idle: 5 * time.Minute, wantBytes: 64 << 20},
		{name: "an admin's opt-in for more", shm: "8Gi", wantBytes: 8 << 30},
		{name: "negative shm size", shm: "-64Mi", wantErr: "--mps-shm-size=-64Mi is negative"},
		{name: "shm size in words", shm: "64 megabytes", wantErr: "--mps-shm-size=64 megabytes: want a size such as 64Mi"},
		{name: "negative idle grace", shm: "64Mi", idle: -time.Second, wantErr: "--mps-idle-grace=-1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Options{MPSOptions: MPSOptions{MPSShmSize: tc.shm, MPSIdleGrace: tc.idle, MPSDaemonMode: MPSDaemonProcess}}
			got, err := f.mpsShmSizeBytes()
			if _, verr := f.Parse(false, ""); err == nil {
				err = verr
			}
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

// TestClaimShmSize: on real GPUs a claim's /dev/shm is a tmpfs of
// --mps-shm-size, and 0, which would leave an unbounded plain directory on
// the host charged to no pod once its writer is gone, is refused with the
// flag, the chart's value and the fix; fake GPUs use plain directories
// whatever the size.
func TestClaimShmSize(t *testing.T) {
	for _, tc := range []struct {
		name      string
		shm       string
		fake      bool
		wantBytes int64
		wantErr   []string
	}{
		{name: "default on real GPUs", shm: DefaultMPSShmSize, wantBytes: 64 << 20},
		{name: "0 on real GPUs", shm: "0", wantErr: []string{"--mps-shm-size=0: each claim's /dev/shm would be a plain directory under --mps-root (/run/tangram/mps) on the host, with no size bound",
			"charged to no pod once the pod that wrote them is gone", "set a size such as 64Mi (chart kubeletPlugin.mps.shmSize)"}},
		{name: "0Mi on real GPUs", shm: "0Mi", wantErr: []string{"--mps-shm-size=0Mi: each claim's /dev/shm would be a plain directory"}},
		{name: "0 with fake GPUs", shm: "0", fake: true, wantBytes: 0},
		{name: "negative with fake GPUs", shm: "-1", fake: true, wantErr: []string{"--mps-shm-size=-1 is negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{MPSOptions: MPSOptions{MPSShmSize: tc.shm, MPSRoot: "/run/tangram/mps"}}
			got, err := o.claimShmSizeBytes(tc.fake)
			if len(tc.wantErr) == 0 {
				if err != nil || got != tc.wantBytes {
					t.Fatalf("got %d, %v; want %d", got, err, tc.wantBytes)
				}
				return
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want one containing %q", err, w)
				}
			}
		})
	}
}

func TestXIDPolicyFlags(t *testing.T) {
	tests := []struct {
		name    string
		flags   Options
		wantErr string
	}{
		{"defaults", Options{HealthOptions: HealthOptions{HealthInformationalXIDs: joinXIDs(xidtaint.DefaultInformationalXIDs), HealthRecoverAfter: time.Minute}}, ""},
		{"bad informational", Options{HealthOptions: HealthOptions{HealthInformationalXIDs: "13,abc"}}, "--health-informational-xids"},
		{"bad ignored", Options{HealthOptions: HealthOptions{HealthIgnoredXIDs: "0"}}, "--health-ignored-xids"},
		{"both lists", Options{HealthOptions: HealthOptions{HealthInformationalXIDs: "13", HealthIgnoredXIDs: "13"}}, "both informational and ignored"},
		{"negative recovery", Options{HealthOptions: HealthOptions{HealthRecoverAfter: -time.Second}}, "--health-recover-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.flags.xidPolicy()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("xidPolicy() error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestInstallMemoryLimitHook(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "image", "tangram-cdi-hook")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("hook"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	for _, tc := range []struct {
		name      string
		flags     Options
		root      driverroot.Root
		wantPath  string
		wantRoot  string
		wantFile  string
		wantError string
	}{
		{
			name:     "defaults: <state-dir>/bin, host driver root",
			flags:    Options{StateDir: state, HostOptions: HostOptions{MemoryLimitHookBinary: src}},
			root:     driverroot.Root{Path: "/driver-root", HostPath: "/run/nvidia/driver"},
			wantPath: filepath.Join(state, "bin", "tangram-cdi-hook"), wantRoot: "/run/nvidia/driver",
			wantFile: filepath.Join(state, "bin", "tangram-cdi-hook"),
		},
		{
			name: "installed through a mount the host sees elsewhere",
			flags: Options{
				StateDir:    state,
				HostOptions: HostOptions{MemoryLimitHookBinary: src, MemoryLimitHookDir: filepath.Join(dir, "mnt"), MemoryLimitHookHostDir: "/opt/tangram/bin"},
			},
			root:     driverroot.Root{Path: "/"},
			wantPath: "/opt/tangram/bin/tangram-cdi-hook", wantRoot: "/",
			wantFile: filepath.Join(dir, "mnt", "tangram-cdi-hook"),
		},
		{
			name:      "no hook in the image",
			flags:     Options{StateDir: state, HostOptions: HostOptions{MemoryLimitHookBinary: filepath.Join(dir, "missing", "tangram-cdi-hook")}},
			root:      driverroot.Root{Path: "/"},
			wantError: "this node enforces shares hard, so every share's container needs tangram-cdi-hook",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hook, err := tc.flags.InstallMemoryLimitHook(tc.root)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if hook.Path != tc.wantPath || hook.DriverRoot != tc.wantRoot {
				t.Errorf("hook %+v, want path %s driver root %s", hook, tc.wantPath, tc.wantRoot)
			}
			if data, err := os.ReadFile(tc.wantFile); err != nil || string(data) != "hook" {
				t.Errorf("installed file %s: %q, %v", tc.wantFile, data, err)
			}
		})
	}
}

// TestOptionsDefaultsValidate: the flags' own defaults are valid, and a
// zero Options (no flags registered) is refused with the flags to fix.
func TestOptionsDefaultsValidate(t *testing.T) {
	var opts Options
	opts.AddFlags(pflag.NewFlagSet("run", pflag.ContinueOnError))
	if _, err := opts.Parse(false, ""); err != nil {
		t.Errorf("defaults: %v", err)
	}
	_, err := Options{}.Parse(false, "")
	for _, want := range []string{`--mps-daemon=""`, "--mps-shm-size="} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("zero options: error %v lacks %q", err, want)
		}
	}
}

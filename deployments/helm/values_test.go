//go:build helm

package helm

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	tangramslices "github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestSchemaRejects: bad values fail at install time with a message that
// names the offending value, instead of producing a broken DaemonSet.
func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name string
		sets []string
		// notSchema: the chart's templates refuse the values, not the schema.
		notSchema bool
		wantErr   []string
	}{
		{name: "unknown top-level key", sets: []string{"fakeGpu.profile=dgx-h100"}, wantErr: []string{"fakeGpu"}},
		{name: "unknown profile", sets: []string{"fakeGPU.profile=dgx-h200"}, wantErr: []string{"fakeGPU", "profile"}},
		{name: "profile and profile file together", sets: []string{"fakeGPU.profile=dgx-h100", "fakeGPU.profileFile=x: y"},
			notSchema: true, wantErr: []string{"fakeGPU.profile and fakeGPU.profileFile are mutually exclusive"}},
		{name: "sharing as a string", sets: []string{"sharing.enabled=yes"}, wantErr: []string{"sharing", "enabled"}},
		{name: "verbosity out of range", sets: []string{"logVerbosity=11"}, wantErr: []string{"logVerbosity"}},
		{name: "pull policy", sets: []string{"image.pullPolicy=Sometimes"}, wantErr: []string{"pullPolicy"}},
		{name: "repository with a tag", sets: []string{"kubeletPlugin.image.repository=foo/bar:v1"}, wantErr: []string{"repository"}},
		{name: "relative host path", sets: []string{"kubeletPlugin.hostPaths.cdiRoot=var/run/cdi"}, wantErr: []string{"cdiRoot"}},
		{name: "relative sysfs root", sets: []string{"kubeletPlugin.sysfsRoot=driver-root/sys"}, wantErr: []string{"sysfsRoot"}},
		{name: "relative driver proc root", sets: []string{"kubeletPlugin.driverProcRoot=driver-root/proc"}, wantErr: []string{"driverProcRoot"}},
		{name: "maxUnavailable negative", sets: []string{"kubeletPlugin.updateStrategy.maxUnavailable=-1"}, wantErr: []string{"maxUnavailable"}},
		{name: "maxSurge over 100%", sets: []string{"kubeletPlugin.updateStrategy.maxSurge=150%"}, wantErr: []string{"maxSurge"}},
		{name: "no surge and none unavailable", sets: []string{"kubeletPlugin.updateStrategy.maxSurge=0"},
			notSchema: true, wantErr: []string{"maxSurge and kubeletPlugin.updateStrategy.maxUnavailable are both 0"}},
		{name: "bad node label key", sets: []string{"nodeLabelAttributes={not a label}"}, wantErr: []string{"nodeLabelAttributes"}},
		{name: "metrics port", sets: []string{"metrics.port=70000"}, wantErr: []string{"port"}},
		{name: "controller replicas", sets: []string{"controller.replicas=0"}, wantErr: []string{"replicas"}},
		{name: "MPS namespace not a DNS label", sets: []string{"kubeletPlugin.mps.namespace.name=GPU_MPS"}, wantErr: []string{"namespace", "name"}},
		{name: "MPS namespace is the release namespace", sets: []string{"kubeletPlugin.mps.namespace.name=" + namespace},
			notSchema: true, wantErr: []string{"must not be the release namespace"}},
		// kube-* namespaces hold the cluster's own components and are often
		// exempt from admission policies: no plugin pod rights there.
		{name: "MPS namespace kube-system", sets: []string{"kubeletPlugin.mps.namespace.name=kube-system"},
			notSchema: true, wantErr: []string{"kubeletPlugin.mps.namespace.name=kube-system", "kube-*"}},
		{name: "MPS namespace kube-public", sets: []string{"kubeletPlugin.mps.namespace.name=kube-public"},
			notSchema: true, wantErr: []string{"kube-*"}},
		{name: "MPS namespace kube-node-lease", sets: []string{"kubeletPlugin.mps.namespace.name=kube-node-lease"},
			notSchema: true, wantErr: []string{"kube-*"}},
		{name: "MPS namespace any kube-", sets: []string{"kubeletPlugin.mps.namespace.name=kube-gpu"},
			notSchema: true, wantErr: []string{"kube-*"}},
		{name: "a release in kube-system with the default MPS namespace", sets: []string{"--namespace=kube-system"},
			notSchema: true, wantErr: []string{"kubeletPlugin.mps.namespace.name=kube-system-mps", "kube-*"}},
		// Without the daemon-pod policy, root on one GPU node could create
		// any pod in the MPS namespace on any node (a control-plane node).
		{name: "MPS daemon pods without admission policies", sets: []string{"admissionPolicy.enabled=false"},
			notSchema: true, wantErr: []string{"admissionPolicy.enabled=false", "kubeletPlugin.mps.daemon=pod", "kubeletPlugin.mps.daemon=process"}},
		// A negative size would leave each claim's /dev/shm unbounded.
		{name: "MPS shm size negative", sets: []string{"kubeletPlugin.mps.shmSize=-64Mi"}, wantErr: []string{"shmSize"}},
		{name: "MPS shm size negative integer", sets: []string{"kubeletPlugin.mps.shmSize=-1"}, wantErr: []string{"shmSize"}},
		{name: "MPS shm size in words", sets: []string{"kubeletPlugin.mps.shmSize=64 megabytes"}, wantErr: []string{"shmSize"}},
		// On real GPUs 0 would be an unbounded directory on the host,
		// its pages charged to no pod once their writer is gone.
		{name: "MPS shm size 0 on real GPUs", sets: []string{"kubeletPlugin.mps.shmSize=0"}, notSchema: true,
			wantErr: []string{"kubeletPlugin.mps.shmSize=0: on real GPUs each claim's /dev/shm would be a plain directory", "no size bound", "charged to no pod", "64Mi"}},
		{name: "MPS shm size 0Mi on real GPUs", sets: []string{"kubeletPlugin.mps.shmSize=0Mi"}, notSchema: true,
			wantErr: []string{"kubeletPlugin.mps.shmSize=0Mi: on real GPUs"}},
		{name: "MPS idle grace without a unit", sets: []string{"kubeletPlugin.mps.idleGrace=300"}, wantErr: []string{"idleGrace"}},
		{name: "MPS idle grace in words", sets: []string{"kubeletPlugin.mps.idleGrace=5 minutes"}, wantErr: []string{"idleGrace"}},
		{name: "webhook certificate validity in days", sets: []string{"controller.webhook.certValidity=90d"}, wantErr: []string{"certValidity"}},
		{name: "cert-manager issuer kind", sets: []string{"controller.webhook.certManager.issuerRef.kind=Vault"}, wantErr: []string{"kind"}},
		{name: "network policy switch as a string", sets: []string{"networkPolicy.enabled=maybe"}, wantErr: []string{"networkPolicy"}},
		{name: "extended resource without a domain", sets: []string{"deviceClasses.gpu.extendedResourceName=gpu"}, wantErr: []string{"extendedResourceName"}},
		{name: "monitoring interval without a unit", sets: []string{"monitoring.interval=30"}, wantErr: []string{"interval"}},
		{name: "monitoring dashboard label not a string", sets: []string{`monitoring.dashboard.labels@json={"grafana_dashboard":1}`}, wantErr: []string{"grafana_dashboard"}},
		{name: "extra arg that is not a flag", sets: []string{"kubeletPlugin.extraArgs={oops}"}, wantErr: []string{"extraArgs"}},
		{
			name:    "default GpuConfig with an unknown backend",
			sets:    []string{`deviceClasses.shared.defaultConfig@json={"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"vcuda"}}`},
			wantErr: []string{"backend"},
		},
		{name: "unknown sharing backend", sets: []string{"sharing.backend=vcuda"}, wantErr: []string{"backend"}},
		{
			// The shared classes select sharing.backend's cards: a
			// config naming another backend would fail every prepare.
			name:      "default GpuConfig naming another backend than the nodes'",
			sets:      []string{`deviceClasses.shared.defaultConfig@json={"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"backend":"none"}}`},
			wantErr:   []string{`names sharing backend "none" but the nodes share with sharing.backend="mps"`},
			notSchema: true,
		},
		{
			name:    "default GpuConfig of the wrong kind",
			sets:    []string{`deviceClasses.shared.defaultConfig@json={"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GPUConfig"}`},
			wantErr: []string{"kind"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := template(t, tc.sets...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want a schema error; rendered %d bytes", tc.sets, len(out))
			}
			msg := err.Error()
			if isSchema := strings.Contains(msg, "values don't meet the specifications of the schema"); isSchema == tc.notSchema {
				t.Errorf("schema error = %v, want %v: %s", isSchema, !tc.notSchema, msg)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not mention %q: %s", w, msg)
				}
			}
		})
	}
}

// TestSchemaProfiles keeps the schema's list of fake profiles equal to the
// profiles the plugin has built in.
func TestSchemaProfiles(t *testing.T) {
	data, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatalf("reading schema: %v", err)
	}
	var schema struct {
		Properties struct {
			FakeGPU struct {
				Properties struct {
					Profile struct {
						Enum []string `json:"enum"`
					} `json:"profile"`
				} `json:"properties"`
			} `json:"fakeGPU"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("decoding schema: %v", err)
	}
	want := append([]string{""}, fakegpu.BuiltinProfileNames()...)
	if got := schema.Properties.FakeGPU.Properties.Profile.Enum; !slices.Equal(got, want) {
		t.Errorf("schema allows fake profiles %q, the plugin has %q", got, want)
	}
}

// TestDeviceClassesMatchGo: the chart publishes exactly the classes of
// device.DeviceClasses() by default (which the simulator, the scheduler
// plugin's tests and the fixtures use), of device.StrictDeviceClasses()
// with sharing.requireHardEnforcement=true and of
// device.DeviceClassesFor("none", false) with sharing.backend=none; only the
// chart's labels, the shared classes' config and the opt-in extended
// resource name are extra.
func TestDeviceClassesMatchGo(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want []*resourceapi.DeviceClass
	}{
		{nil, device.DeviceClasses()},
		{[]string{"sharing.requireHardEnforcement=true"}, device.StrictDeviceClasses()},
		{[]string{"sharing.backend=none"}, device.DeviceClassesFor(device.ShareBackendNone, false)},
	} {
		rendered := render(t, tc.sets...)["DeviceClass"]
		var got []*resourceapi.DeviceClass
		for _, want := range tc.want {
			obj, ok := rendered[want.Name]
			if !ok {
				t.Errorf("%v: the chart does not publish DeviceClass %s", tc.sets, want.Name)
				continue
			}
			dc := obj.(*resourceapi.DeviceClass).DeepCopy()
			dc.TypeMeta, dc.Labels, dc.Spec.Config, dc.Spec.ExtendedResourceName = want.TypeMeta, nil, nil, nil
			got = append(got, dc)
		}
		if len(rendered) != len(tc.want) {
			t.Errorf("%v: the chart publishes %d DeviceClasses, Go has %d", tc.sets, len(rendered), len(tc.want))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%v: chart DeviceClasses differ from Go's (-go +chart):\n%s", tc.sets, diff)
		}
	}
}

// TestDeviceClasses compiles the classes' CEL selectors with the scheduler's
// own CEL environment and runs them on the devices the plugin publishes for a
// fake DGX H100 with sharing on and off.
func TestDeviceClasses(t *testing.T) {
	objs := render(t)
	whole := objs.get(t, "DeviceClass", device.DeviceClassName).(*resourceapi.DeviceClass)
	shared := objs.get(t, "DeviceClass", device.SharedDeviceClassName).(*resourceapi.DeviceClass)

	if len(whole.Spec.Selectors) != 1 || whole.Spec.Selectors[0].CEL == nil ||
		whole.Spec.Selectors[0].CEL.Expression != device.WholeCardSelector() {
		t.Errorf("%s selectors = %+v, want exactly %s", whole.Name, whole.Spec.Selectors, device.WholeCardSelector())
	}
	if len(whole.Spec.Config) != 0 {
		t.Errorf("%s carries config %+v; whole cards need none", whole.Name, whole.Spec.Config)
	}
	// By default the shared classes carry no config: the backend is the
	// nodes' (sharing.backend). A defaultConfig is attached to both.
	if len(shared.Spec.Config) != 0 {
		t.Errorf("%s carries config %+v by default; the backend is the nodes'", shared.Name, shared.Spec.Config)
	}
	tuned := render(t, `deviceClasses.shared.defaultConfig@json={"apiVersion":"gpu.tangram.dev/v1alpha1","kind":"GpuConfig","sharing":{"mps":{"defaultActiveThreadPercentage":50}}}`)
	for _, name := range []string{device.SharedDeviceClassName, device.HardSharedDeviceClassName} {
		dc := tuned.get(t, "DeviceClass", name).(*resourceapi.DeviceClass)
		if len(dc.Spec.Config) != 1 || dc.Spec.Config[0].Opaque == nil || dc.Spec.Config[0].Opaque.Driver != device.DriverName {
			t.Fatalf("%s config = %+v, want the defaultConfig for %s", name, dc.Spec.Config, device.DriverName)
		}
		cfg, err := v1alpha1.Parse(dc.Spec.Config[0].Opaque.Parameters.Raw)
		if err != nil {
			t.Fatalf("%s's config is rejected by the plugin: %v", name, err)
		}
		if cfg.Sharing == nil || cfg.Sharing.MPS == nil || *cfg.Sharing.MPS.DefaultActiveThreadPercentage != 50 {
			t.Errorf("%s config = %v, want the defaultConfig", name, cfg)
		}
	}
	if whole.Spec.ExtendedResourceName != nil {
		t.Errorf("%s serves extended resource %q by default; it must be opt-in", whole.Name, *whole.Spec.ExtendedResourceName)
	}
	ext := render(t, "deviceClasses.gpu.extendedResourceName=nvidia.com/gpu")
	if got := ext.get(t, "DeviceClass", device.DeviceClassName).(*resourceapi.DeviceClass).Spec.ExtendedResourceName; got == nil || *got != "nvidia.com/gpu" {
		t.Errorf("extendedResourceName=nvidia.com/gpu: class serves %v, want nvidia.com/gpu", got)
	}
	if got := ext.get(t, "DeviceClass", device.SharedDeviceClassName).(*resourceapi.DeviceClass).Spec.ExtendedResourceName; got != nil {
		t.Errorf("the shared class serves extended resource %q; shares cannot be sized by an extended resource", *got)
	}

	profile, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatalf("loading profile: %v", err)
	}
	ctx := context.Background()
	gpus, err := fakegpu.NewFakeSource("node-a", profile).GPUs(ctx)
	if err != nil {
		t.Fatalf("fake GPUs: %v", err)
	}
	hard := objs.get(t, "DeviceClass", device.HardSharedDeviceClassName).(*resourceapi.DeviceClass)
	strict := render(t, "sharing.requireHardEnforcement=true").get(t, "DeviceClass", device.SharedDeviceClassName).(*resourceapi.DeviceClass)
	noneShared := render(t, "sharing.backend=none").get(t, "DeviceClass", device.SharedDeviceClassName).(*resourceapi.DeviceClass)
	tests := []struct {
		sharing     bool
		enforcement string // the node's shareEnforcement; "" = not published
		backend     string // the node's shareBackend; "" = not published (older plugins: mps)
		wantWhole   bool
		wantShared  bool // shared-gpu.tangram.dev by default: every level
		wantHard    bool // hard-shared-gpu.tangram.dev
		wantStrict  bool // shared-gpu.tangram.dev with sharing.requireHardEnforcement=true
		wantNone    bool // shared-gpu.tangram.dev with sharing.backend=none
		otherDriver bool
	}{
		{sharing: true, enforcement: "hard", backend: "mps", wantWhole: true, wantShared: true, wantHard: true, wantStrict: true},
		{sharing: true, enforcement: "compute-only", backend: "mps", wantWhole: true, wantShared: true},
		{sharing: true, enforcement: "advisory", backend: "mps", wantWhole: true, wantShared: true},
		{sharing: true, enforcement: "", backend: "mps", wantWhole: true, wantShared: true},
		{sharing: true, enforcement: "hard", backend: "", wantWhole: true, wantShared: true, wantHard: true, wantStrict: true},
		{sharing: true, enforcement: "advisory", backend: "none", wantWhole: true, wantNone: true},
		{sharing: true, enforcement: "hard", backend: "none", wantWhole: true, wantNone: true},
		{sharing: false, enforcement: "hard", backend: "mps", wantWhole: true},
		{sharing: true, enforcement: "hard", backend: "mps", otherDriver: true},
	}
	for _, tc := range tests {
		devices, err := tangramslices.Devices(gpus, tangramslices.Options{NodeName: "node-a", Sharing: tc.sharing, ShareEnforcement: tc.enforcement, ShareBackend: tc.backend})
		if err != nil {
			t.Fatalf("publishing devices: %v", err)
		}
		driver := device.DriverName
		if tc.otherDriver {
			driver = "gpu.nvidia.com"
		}
		for _, class := range []struct {
			what string
			dc   *resourceapi.DeviceClass
			want bool
		}{{"", whole, tc.wantWhole}, {"", shared, tc.wantShared}, {"", hard, tc.wantHard},
			{" (requireHardEnforcement=true)", strict, tc.wantStrict}, {" (backend=none)", noneShared, tc.wantNone}} {
			for _, d := range devices {
				got := true
				for _, sel := range class.dc.Spec.Selectors {
					compiled := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true}).CompileCELExpression(sel.CEL.Expression, cel.Options{})
					if compiled.Error != nil {
						t.Fatalf("%s selector does not compile: %v", class.dc.Name, compiled.Error)
					}
					ok, _, err := compiled.DeviceMatches(ctx, cel.Device{
						Driver: driver, AllowMultipleAllocations: d.AllowMultipleAllocations,
						Attributes: d.Attributes, Capacity: d.Capacity,
					})
					if err != nil {
						t.Errorf("%s%s on %s (sharing=%v, enforcement %q, backend %q): evaluation error %v", class.dc.Name, class.what, d.Name, tc.sharing, tc.enforcement, tc.backend, err)
					}
					got = got && ok
				}
				if got != class.want {
					t.Errorf("%s%s matches %s of driver %s with sharing=%v, enforcement %q, backend %q: %v, want %v",
						class.dc.Name, class.what, d.Name, driver, tc.sharing, tc.enforcement, tc.backend, got, class.want)
				}
			}
		}
	}
}

// TestNotesSayHowSharesAreEnforced: the notes after install say that the
// default shared class runs advisory shares, name the hard class, and give
// the command that shows each node's enforcement level (a fresh install has
// no ResourceSlices to look up yet); strict, they say the class is strict.
func TestNotesSayHowSharesAreEnforced(t *testing.T) {
	notes := func(sets ...string) string {
		t.Helper()
		args := append([]string{"install", releaseName, chartDir, "--namespace", namespace, "--dry-run=client"}, setArgs(sets)...)
		out, err := runHelm(t, args...)
		if err != nil {
			t.Fatalf("helm install --dry-run %v: %v", sets, err)
		}
		_, after, ok := strings.Cut(out, "NOTES:")
		if !ok {
			t.Fatalf("no NOTES in:\n%s", out)
		}
		return after
	}
	def := notes()
	for _, want := range []string{
		`runs "advisory"`, "Warning event", device.HardSharedDeviceClassName,
		"no node has published its GPUs yet",
		"custom-columns='NODE:.spec.nodeName,SHARES:.spec.devices[0].attributes.shareEnforcement.string,WHY:.spec.devices[0].attributes.shareEnforcementReason.string",
		"Backend: mps",
	} {
		if !strings.Contains(def, want) {
			t.Errorf("default notes do not say %q:\n%s", want, def)
		}
	}
	if strict := notes("sharing.requireHardEnforcement=true"); !strings.Contains(strict, `takes only nodes whose shareEnforcement is "hard"`) {
		t.Errorf("strict notes do not say the default class is strict:\n%s", strict)
	}
}

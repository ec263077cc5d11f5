package schedperf

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/packing"
	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/preempt"
)

// TestTangramProfileRegistersInHarness builds the scheduler the way
// scheduler_perf does (its loadSchedulerConfig: the scheme's universal
// decoder and validation; its util.StartSchedulerWithDone: scheduler.New
// with the profiles and the out-of-tree registry) from the configuration
// and registry the benchmark passes, and checks that the harness's profile
// runs tangram-scheduler's plugins at the chart's extension points. Without
// a plugin in the registry the scheduler cannot be built, so the benchmark
// would fail rather than measure the stock profile twice.
func TestTangramProfileRegistersInHarness(t *testing.T) {
	without := func(name string) frameworkruntime.Registry {
		r := Registry()
		delete(r, name)
		return r
	}
	for _, tc := range []struct {
		name     string
		registry frameworkruntime.Registry
		wantErr  string
	}{
		{name: "tangram-scheduler's registry", registry: Registry()},
		{name: "without TangramPacking", registry: without(packing.Name), wantErr: packing.Name},
		{name: "without TangramPreemption", registry: without(preempt.Name), wantErr: preempt.Name},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, err := WriteSchedulerConfig(t.TempDir(), "tangram", 5)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			obj, _, err := scheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
			if err != nil {
				t.Fatalf("decoding %s as the harness does: %v", filepath.Base(path), err)
			}
			cfg, ok := obj.(*config.KubeSchedulerConfiguration)
			if !ok {
				t.Fatalf("decoded a %T, want a KubeSchedulerConfiguration", obj)
			}
			if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
				t.Fatalf("the harness would refuse the profile: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset()
			broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
			defer broadcaster.Shutdown()
			// The profile once more with PodTopologySpread off: with its
			// default constraints the stock plugin signs no pod, which
			// would hide whether ours does (below).
			signing := cfg.Profiles[0].DeepCopy()
			signing.SchedulerName = "signing"
			for _, set := range []*config.PluginSet{&signing.Plugins.MultiPoint, &signing.Plugins.PreFilter, &signing.Plugins.Filter,
				&signing.Plugins.PreScore, &signing.Plugins.Score} {
				set.Enabled = slices.DeleteFunc(set.Enabled, func(p config.Plugin) bool { return p.Name == "PodTopologySpread" })
			}
			signing.Plugins.MultiPoint.Disabled = append(signing.Plugins.MultiPoint.Disabled, config.Plugin{Name: "PodTopologySpread"})
			sched, err := scheduler.New(ctx, client, scheduler.NewInformerFactory(client, 0, nil), nil,
				profile.NewRecorderFactory(broadcaster),
				scheduler.WithProfiles(cfg.Profiles[0], *signing),
				scheduler.WithFrameworkOutOfTreeRegistry(tc.registry))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("scheduler.New: got error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("scheduler.New with the benchmark's profile: %v", err)
			}
			fw, ok := sched.Profiles[ProfileName]
			if !ok {
				t.Fatalf("no profile %q (the harness's pods use it); profiles: %v", ProfileName, len(sched.Profiles))
			}
			plugins := fw.ListPlugins()
			for _, want := range []struct {
				point string
				set   config.PluginSet
				name  string
			}{
				{"preScore", plugins.PreScore, packing.Name},
				{"score", plugins.Score, packing.Name},
				{"reserve", plugins.Reserve, packing.Name},
				{"postFilter", plugins.PostFilter, preempt.Name},
				{"postFilter", plugins.PostFilter, "DefaultPreemption"},
				{"filter", plugins.Filter, "DynamicResources"},
			} {
				if !slices.ContainsFunc(want.set.Enabled, func(p config.Plugin) bool { return p.Name == want.name }) {
					t.Errorf("%s of profile %s lacks %s: %v", want.point, ProfileName, want.name, want.set.Enabled)
				}
			}
			// Opportunistic batching stays possible: a plugin without
			// SignPod turns it off for the whole profile (no signature for
			// any pod).
			plain := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "pause"}}}}
			if sig := sched.Profiles["signing"].SignPod(ctx, plain); sig == nil {
				t.Errorf("profile %s without PodTopologySpread signs no plain pod: kube-scheduler disabled opportunistic batching for it", ProfileName)
			}
		})
	}
}

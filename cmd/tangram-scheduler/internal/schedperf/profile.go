// Package schedperf runs Kubernetes' own scheduler benchmark,
// k8s.io/kubernetes/test/integration/scheduler_perf at v1.37.0, twice per
// workload: once with the stock kube-scheduler profile and once with
// tangram-scheduler's (the chart's TangramPacking and TangramPreemption
// plugins), each from a fresh etcd and API server. The workloads are
// upstream's DRA test cases as upstream ships them, plus test cases on
// Tangram's ResourceSlices and DeviceClasses (see workloads.go).
// `make bench-scheduler-perf` runs it; docs/placement.md has the table.
package schedperf

import (
	"fmt"
	"os"
	"path/filepath"

	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/packing"
	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/preempt"
)

// ProfileName is the profile the harness's pods use: its templates leave
// spec.schedulerName unset, so tangram-scheduler's plugins go into the
// default profile here, where the chart names its profile "tangram".
const ProfileName = "default-scheduler"

// Registry is the out-of-tree registry tangram-scheduler's main.go builds
// (app.WithPlugin for both plugins), in the form the harness takes.
func Registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		packing.Name: packing.New,
		preempt.Name: preempt.New,
	}
}

// SchedulerConfig is the chart's scheduler profile
// (deployments/helm/tangram/templates/scheduler.yaml, default values:
// policy tangram, weight 5, preemption on), without leader election and
// under ProfileName.
func SchedulerConfig(policy string, weight int) string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: %s
    plugins:
      preScore:
        enabled: [{name: %[2]s}]
      score:
        enabled: [{name: %[2]s, weight: %[4]d}]
      reserve:
        enabled: [{name: %[2]s}]
      postFilter:
        enabled: [{name: %[5]s}]
      podGroupPostFilter:
        enabled: [{name: %[5]s}]
    pluginConfig:
      - name: %[2]s
        args:
          policy: %[3]s
`, ProfileName, packing.Name, policy, weight, preempt.Name)
}

// WriteSchedulerConfig writes SchedulerConfig into dir and returns its path.
func WriteSchedulerConfig(dir, policy string, weight int) (string, error) {
	path := filepath.Join(dir, "tangram-scheduler-config.yaml")
	if err := os.WriteFile(path, []byte(SchedulerConfig(policy, weight)), 0o644); err != nil {
		return "", fmt.Errorf("writing tangram-scheduler's profile for the harness: %w", err)
	}
	return path, nil
}

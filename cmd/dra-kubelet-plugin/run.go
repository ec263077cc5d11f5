package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/gpu/nvmlgpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/app"
	"github.com/tangram-gpu/tangram/pkg/plugin/cdi/nvidia"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

func newRunCommand() *cobra.Command {
	var (
		source gpuSourceFlags
		model  deviceModelFlags
		opts   app.Options
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the kubelet plugin: publish this node's GPUs and prepare claims",
		Example: `  # on a node without GPUs, as root, with a kubeconfig:
  dra-kubelet-plugin run --node-name $(hostname) --fake-profile dgx-h100 --kubeconfig /etc/kubernetes/admin.conf
  # without any cluster (state recovery, health and metrics only):
  dra-kubelet-plugin run --node-name n1 --fake-profile pcie-l4 --offline`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := source.Complete(); err != nil {
				return err
			}
			// Check every flag before touching the node: the device
			// model's (built again with the Node's labels), and the
			// plugin's, parsed once into the settings Run gets.
			if _, err := model.Options(source.NodeName, nil); err != nil {
				return err
			}
			settings, err := opts.Parse(source.Fake(), source.DriverRoot)
			if err != nil {
				return err
			}
			return runPlugin(cmd.Context(), &source, &model, settings)
		},
	}
	source.AddFlags(cmd.Flags())
	model.AddFlags(cmd.Flags())
	opts.AddFlags(cmd.Flags())
	return cmd
}

// runPlugin finds the node's cards with the GPU source flags, what they
// need and can enforce, and runs the plugin over them with the settings
// parsed from its flags.
func runPlugin(ctx context.Context, source *gpuSourceFlags, model *deviceModelFlags, opts app.Settings) error {
	client, err := opts.NewKubeClient()
	if err != nil {
		return err
	}
	src, done, err := source.Open(ctx)
	if err != nil {
		return err
	}
	defer done()
	gpus, err := src.GPUs(ctx)
	if err != nil {
		return fmt.Errorf("listing GPUs: %w", err)
	}
	gpu.LogMIG(klog.FromContext(ctx), gpus)
	node := app.Node{
		NodeName:      source.NodeName,
		GPUs:          gpus,
		FakeGPUs:      source.Fake(),
		Sharing:       model.Sharing == "enabled",
		ShareBackend:  model.ShareBackend,
		NVIDIADriver:  app.NVIDIADriver{DriverRoot: opts.HostDriverRootOf(source.DriverRoot)},
		KubeClient:    client,
		HealthWatcher: opts.NewHealthWatcher(ctx, src, source.Fake()),
		Processes:     opts.NewProcessLister(src, source.Fake()),
	}
	if !source.Fake() {
		if err := addRealGPUEdits(ctx, &node, src, opts); err != nil {
			return err
		}
	}
	caps := model.Enforcement(ctx, source.Fake(), src, gpus)
	node.MPSv3Available = caps.MPSv3
	node.ShareEnforcement, node.ShareEnforcementReason = string(caps.Level), caps.ReasonCode
	if caps.Level == enforcement.Hard {
		if node.MemoryLimitHook, err = opts.InstallMemoryLimitHook(node.DriverRoot); err != nil {
			return err
		}
	}
	node.Resources = func(labels map[string]string) (*resourceslice.DriverResources, error) {
		opts, err := model.Options(source.NodeName, labels)
		if err != nil {
			return nil, err
		}
		opts.Sysfs = source.Sysfs()
		opts.ShareEnforcement, opts.ShareEnforcementReason = string(caps.Level), caps.ReasonCode
		// opts.ShareBackend comes from --share-backend (model.Options).
		return resourceslices.DriverResources(gpus, opts)
	}
	return app.Run(ctx, opts, node)
}

// addRealGPUEdits sets up what real cards need: NVML's MIG calls, the
// NVML library for compute modes, and the CDI edits of NVIDIA's driver
// files and device nodes, discovered before the first prepare.
func addRealGPUEdits(ctx context.Context, node *app.Node, src gpu.Source, opts app.Settings) error {
	var err error
	if node.MIG, err = nvmlgpu.Partitions(src); err != nil {
		return fmt.Errorf("MIG instance calls: %w", err)
	}
	root := node.DriverRoot
	if node.NVMLLibrary, err = root.NVMLLibraryPath(); err != nil {
		return err
	}
	hook, err := opts.NVIDIACDIHookPath(root)
	if err != nil {
		return err
	}
	hw, err := nvidia.New(ctx, nvidia.Options{DriverRoot: root.Path, HostDriverRoot: root.HostPath, DevRoot: opts.DevRoot,
		CDIHookPath: hook, NVMLLibrary: node.NVMLLibrary, ProcRoot: opts.DriverProcRoot, ProcRootFlag: "--driver-proc-root (chart: kubeletPlugin.driverProcRoot)"})
	if err != nil {
		return fmt.Errorf("setting up CDI edits for real GPUs: %w", err)
	}
	// Driver discovery is slow; pay for it before the first prepare.
	if err := hw.Warm(node.GPUs); err != nil {
		return fmt.Errorf("discovering NVIDIA driver files for CDI (--driver-root=%s): %w", root.Path, err)
	}
	node.Hardware = hw
	return nil
}

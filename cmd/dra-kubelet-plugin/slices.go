package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// deviceModelFlags are the flags that shape the published devices; the
// slices and run subcommands share them.
type deviceModelFlags struct {
	Sharing             string
	ShareBackend        string
	NodeLabelAttributes []string
	MemoryStep          string
	// ProcRoot and CgroupRoot are where share enforcement is detected from
	// (pkg/plugin/enforcement): the kernel release and the host's cgroup
	// root, and KubeletPodsCgroup the kubelet's pods cgroup under it.
	ProcRoot          string
	CgroupRoot        string
	KubeletPodsCgroup string
}

func (f *deviceModelFlags) AddFlags(flags *pflag.FlagSet) {
	flags.StringVar(&f.Sharing, "sharing", "enabled", "enabled: cards can be shared by several claims (memory/compute shares); disabled: whole cards only")
	flags.StringVar(&f.ShareBackend, "share-backend", device.ShareBackendMPS, "how this node keeps the shares of a card apart: mps or none (chart: sharing.backend; docs/configuration.md)")
	flags.StringSliceVar(&f.NodeLabelAttributes, "node-label-attributes", nil, "node label keys to copy into device attributes, e.g. topology.kubernetes.io/zone")
	flags.StringVar(&f.MemoryStep, "memory-step", device.DefaultMemoryStep.String(), "granularity of memory shares; requests are rounded up to it")
	flags.StringVar(&f.ProcRoot, "proc-root", "/proc", "proc file system the kernel release is read from (sys/kernel/osrelease), for share enforcement detection")
	flags.StringVar(&f.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the host's cgroup root as this process sees it, read to decide share enforcement (chart: kubeletPlugin.cgroupRoot; docs/configuration.md)")
	flags.StringVar(&f.KubeletPodsCgroup, "kubelet-pods-cgroup", "", "the kubelet's pods cgroup under --cgroup-root; default: kubepods.slice or kubepods, whichever exists (docs/configuration.md)")
}

// Enforcement detects the node's share enforcement level (published as the
// shareEnforcement attribute, with shareEnforcementReason below hard) for
// these cards of src, which a real node's NVML source lets detection ask
// about the driver (enforcement.Driver).
func (f *deviceModelFlags) Enforcement(ctx context.Context, fake bool, src gpu.Source, gpus []gpu.GPU) enforcement.Capabilities {
	versions := make([]string, len(gpus))
	for i, g := range gpus {
		versions[i] = g.DriverVersion
	}
	driver, _ := src.(enforcement.Driver)
	c := enforcement.ForNode(ctx, fake, versions, driver,
		enforcement.Host{ProcRoot: f.ProcRoot, CgroupRoot: f.CgroupRoot, KubeletCgroup: f.KubeletPodsCgroup})
	klog.FromContext(ctx).Info("Share enforcement", "level", c.Level, "reasonCode", c.ReasonCode, "reason", c.Reason, "driverMajor", c.DriverMajor,
		"mpsV3", c.MPSv3, "cgroupV2", c.CgroupV2, "dmem", c.Dmem, "kernel", fmt.Sprintf("%d.%d", c.KernelMajor, c.KernelMinor))
	return c
}

// Options turns the flags into resourceslices.Options for a node with these labels.
func (f *deviceModelFlags) Options(nodeName string, nodeLabels map[string]string) (resourceslices.Options, error) {
	opts := resourceslices.Options{NodeName: nodeName, NodeLabels: nodeLabels, NodeLabelAttributes: f.NodeLabelAttributes}
	switch f.Sharing {
	case "enabled":
		opts.Sharing = true
	case "disabled":
	default:
		return opts, fmt.Errorf("--sharing=%q: want enabled or disabled", f.Sharing)
	}
	switch f.ShareBackend {
	case device.ShareBackendMPS, device.ShareBackendNone:
		opts.ShareBackend = f.ShareBackend
	default:
		return opts, fmt.Errorf("--share-backend=%q: want %s or %s", f.ShareBackend, device.ShareBackendMPS, device.ShareBackendNone)
	}
	step, err := resource.ParseQuantity(f.MemoryStep)
	if err != nil {
		return opts, fmt.Errorf("--memory-step=%q: %w (e.g. 256Mi)", f.MemoryStep, err)
	}
	if v, ok := step.AsInt64(); !ok || v <= 0 {
		return opts, fmt.Errorf("--memory-step=%q: want a positive whole number of bytes, e.g. 256Mi", f.MemoryStep)
	}
	opts.MemoryStep = step
	for _, key := range f.NodeLabelAttributes {
		if _, err := resourceslices.LabelAttributeName(key); err != nil {
			return opts, fmt.Errorf("--node-label-attributes: %w", err)
		}
	}
	return opts, nil
}

func newSlicesCommand() *cobra.Command {
	var (
		source     gpuSourceFlags
		model      deviceModelFlags
		nodeLabels map[string]string
		output     string
	)
	cmd := &cobra.Command{
		Use:   "slices",
		Short: "Print the ResourceSlices the plugin would publish for this node, without a cluster",
		Example: `  dra-kubelet-plugin slices --node-name node-1 --fake-profile dgx-h100
  dra-kubelet-plugin slices --node-name node-1 --fake-profile pcie-l4 --sharing=disabled -o json
  dra-kubelet-plugin slices --node-name node-1 --fake-profile-file gpus.yaml \
      --node-label-attributes topology.kubernetes.io/zone --node-labels topology.kubernetes.io/zone=eu-1a`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "yaml" && output != "json" {
				return fmt.Errorf("-o %q: want yaml or json", output)
			}
			if len(nodeLabels) > 0 && len(model.NodeLabelAttributes) == 0 {
				return errors.New("--node-labels has no effect without --node-label-attributes naming the labels to copy")
			}
			if err := source.Complete(); err != nil {
				return err
			}
			opts, err := model.Options(source.NodeName, nodeLabels)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			opts.Sysfs = source.Sysfs()
			opts.Logger = klog.FromContext(ctx)
			src, done, err := source.Open(ctx)
			if err != nil {
				return err
			}
			defer done()
			gpus, err := src.GPUs(ctx)
			if err != nil {
				return fmt.Errorf("listing GPUs: %w", err)
			}
			caps := model.Enforcement(klog.NewContext(ctx, opts.Logger), source.Fake(), src, gpus)
			opts.ShareEnforcement, opts.ShareEnforcementReason = string(caps.Level), caps.ReasonCode
			res, err := resourceslices.DriverResources(gpus, opts)
			if err != nil {
				return err
			}
			return printSlices(cmd.OutOrStdout(), resourceslices.ResourceSlices(source.NodeName, res), output)
		},
	}
	source.AddFlags(cmd.Flags())
	model.AddFlags(cmd.Flags())
	cmd.Flags().StringToStringVar(&nodeLabels, "node-labels", nil, "labels of the node, key=value,... (stands in for the Node object, which the plugin reads from the API server)")
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}

// sliceList is printed like `kubectl get -o yaml` prints several objects,
// so the output can be fed to kubectl.
type sliceList struct {
	APIVersion string                       `json:"apiVersion"`
	Kind       string                       `json:"kind"`
	Items      []*resourceapi.ResourceSlice `json:"items"`
}

func printSlices(w io.Writer, items []*resourceapi.ResourceSlice, format string) error {
	list := sliceList{APIVersion: "v1", Kind: "List", Items: items}
	var data []byte
	var err error
	if format == "json" {
		data, err = json.MarshalIndent(list, "", "  ")
		data = append(data, '\n')
	} else {
		data, err = yaml.Marshal(list)
	}
	if err != nil {
		return fmt.Errorf("encoding ResourceSlices as %s: %w", format, err)
	}
	_, err = w.Write(data)
	return err
}

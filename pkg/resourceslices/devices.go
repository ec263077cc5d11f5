// Package resourceslices turns a node's GPU inventory into the resource.k8s.io/v1
// devices and ResourceSlices Tangram publishes (the device model of
// DESIGN.md): one device per physical GPU with its identity, topology and
// versions as attributes, and memory/compute as capacities that are
// consumable when the node shares its cards.
//
// Everything here is pure computation over []gpu.GPU; the only optional
// side input is a sysfs view for the PCIe root (see Options.Sysfs).
package resourceslices

import (
	"fmt"
	"io/fs"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Options says how the node's cards are published.
type Options struct {
	// NodeName is the node the cards are on; it names the pool and makes
	// node-local NVLink domains unique. Required.
	NodeName string
	// Sharing publishes every card with allowMultipleAllocations and request
	// policies so several claims can take shares of it (--sharing=enabled).
	Sharing bool
	// NodeLabels are the labels of the Node object.
	NodeLabels map[string]string
	// NodeLabelAttributes lists the node label keys copied into string
	// attributes of every device (see LabelAttributeName for the naming).
	NodeLabelAttributes []string
	// MemoryStep is the granularity of memory shares; zero means 256Mi.
	MemoryStep resource.Quantity
	// ShareEnforcement is the node's enforcement level (pkg/plugin/enforcement),
	// published on every card as shareEnforcement; empty leaves it out.
	ShareEnforcement string
	// ShareEnforcementReason is why the level is not hard (a
	// device.Reason… code), published as shareEnforcementReason; empty
	// leaves it out.
	ShareEnforcementReason string
	// ShareBackend is the node's sharing backend (--share-backend, "mps"
	// or "none"), published as shareBackend on shareable cards only; empty
	// leaves it out.
	ShareBackend string

	// Sysfs, when set, is the host's /sys used to resolve each card's
	// resource.kubernetes.io/pcieRoot. Nil leaves pcieRoot out: fake cards
	// have no sysfs entries, and a fabricated bus ID must never be resolved
	// against the real host.
	Sysfs fs.ReadLinkFS
	// Logger receives notes about values that were left out. The zero value
	// means klog.Background().
	Logger klog.Logger
}

func (o Options) logger() klog.Logger {
	if o.Logger.GetSink() == nil {
		return klog.Background()
	}
	return o.Logger
}

func (o Options) memoryStep() (int64, error) {
	if o.MemoryStep.IsZero() {
		return device.DefaultMemoryStep.Value(), nil
	}
	step, ok := o.MemoryStep.AsInt64()
	if !ok || step <= 0 {
		return 0, fmt.Errorf("memory step %s must be a positive whole number of bytes, e.g. 256Mi", o.MemoryStep.String())
	}
	return step, nil
}

// Devices returns the ResourceSlice devices of every card, sorted by index:
// the card itself, or, for a card in MIG mode, one device per MIG profile
// and placement (migDevices), which consume the card's counter set
// (CounterSets).
// A value a card cannot report (or that the API cannot represent) is left
// out with a log line; errors are reserved for input that would make the
// whole publication wrong: no node name, duplicate or negative indexes, a
// bad memory step, unusable node label keys.
func Devices(gpus []gpu.GPU, opts Options) ([]resourceapi.Device, error) {
	if opts.NodeName == "" {
		return nil, fmt.Errorf("building devices: the node name is empty; set --node-name or NODE_NAME")
	}
	step, err := opts.memoryStep()
	if err != nil {
		return nil, fmt.Errorf("building devices: %w", err)
	}
	labelAttrs, err := labelAttributes(opts.NodeLabelAttributes, opts.NodeLabels)
	if err != nil {
		return nil, fmt.Errorf("building devices: %w", err)
	}

	sorted := slices.Clone(gpus)
	slices.SortFunc(sorted, func(a, b gpu.GPU) int { return a.Index - b.Index })
	for i, g := range sorted {
		if g.Index < 0 {
			return nil, fmt.Errorf("building devices: GPU %s has negative index %d", g.UUID, g.Index)
		}
		if i > 0 && sorted[i-1].Index == g.Index {
			return nil, fmt.Errorf("building devices: two GPUs have index %d (%s and %s); indexes name the devices and must be unique", g.Index, sorted[i-1].UUID, g.UUID)
		}
	}

	logger := opts.logger()
	domains := nvlinkDomains(logger, opts.NodeName, sorted)
	devices := make([]resourceapi.Device, 0, len(sorted))
	for _, g := range sorted {
		cardLogger := klog.LoggerWithValues(logger, "gpu", g.Index)
		var cardDevices []resourceapi.Device
		if g.MIG != nil && g.MIG.Enabled {
			// A card in MIG mode runs nothing as a whole: it offers its
			// partitions instead (mig.go).
			cardDevices = migDevices(cardLogger, g, domains[g.Index], opts)
		} else {
			cardDevices = []resourceapi.Device{newDevice(cardLogger, g, domains[g.Index], step, opts)}
		}
		for _, dev := range cardDevices {
			for name, value := range labelAttrs {
				dev.Attributes[name] = value
			}
			if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				return nil, fmt.Errorf("building device %s: %d attributes and capacities exceed the API limit of %d; copy fewer node labels (--node-label-attributes has %d)",
					dev.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice, len(opts.NodeLabelAttributes))
			}
			devices = append(devices, dev)
		}
	}
	return devices, nil
}

// newDevice builds one card's device. It never fails: what cannot be published
// is logged and left out.
func newDevice(logger klog.Logger, g gpu.GPU, nvlinkDomain string, step int64, opts Options) resourceapi.Device {
	attrs := hardwareAttributes(logger, g, nvlinkDomain, opts)
	attrs[device.AttrType] = resourceapi.DeviceAttribute{StringValue: ptr.To(device.TypeGPU)}
	attrs[device.AttrIndex] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Index))}
	attrs[device.AttrMinor] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Minor))}
	attrs[device.AttrNVLinkPeers] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(countPeers(g)))}
	setString(logger, attrs, device.AttrUUID, g.UUID)
	if opts.ShareEnforcement != "" {
		setString(logger, attrs, device.AttrShareEnforcement, opts.ShareEnforcement)
	}
	if opts.ShareEnforcementReason != "" {
		setString(logger, attrs, device.AttrShareEnforcementReason, opts.ShareEnforcementReason)
	}

	dev := resourceapi.Device{
		Name:       device.CardDeviceName(g.Index),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			device.CapacityCompute: {Value: *resource.NewQuantity(device.ComputeCapacity, resource.DecimalSI)},
		},
	}
	// The memory capacity is what processes can allocate: the total less
	// what the driver reserves (gpu.GPU.UnreservedMemoryBytes). Shares are
	// sized from it, so a card filled with shares never promises memory
	// the driver keeps; a claim naming no memory still gets all of it, the
	// whole card.
	memory := g.UnreservedMemoryBytes()
	if memory > 0 {
		dev.Capacity[device.CapacityMemory] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(memory, resource.BinarySI)}
		if g.ReservedMemoryBytes > 0 {
			logger.V(2).Info("Publishing the GPU's memory less what the driver reserves",
				"memoryBytes", g.MemoryBytes, "reservedMemoryBytes", g.ReservedMemoryBytes, "capacityBytes", memory)
		}
	} else {
		logger.Info("GPU reports no memory size; publishing it without memory capacity", "memoryBytes", g.MemoryBytes)
	}

	shareable := opts.Sharing && makeShareable(logger, &dev, memory, step)
	attrs[device.AttrShareable] = resourceapi.DeviceAttribute{BoolValue: ptr.To(shareable)}
	if shareable && opts.ShareBackend != "" {
		setString(logger, attrs, device.AttrShareBackend, opts.ShareBackend)
	}
	return dev
}

// hardwareAttributes are the attributes a card and each of its MIG
// partitions carry alike: what the card is (product, architecture,
// versions) and where it sits (NVLink domain, PCI bus, PCIe root, NUMA
// node).
func hardwareAttributes(logger klog.Logger, g gpu.GPU, nvlinkDomain string, opts Options) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	attrs[device.AttrNVLinkDomain] = resourceapi.DeviceAttribute{StringValue: ptr.To(nvlinkDomain)}
	setString(logger, attrs, device.AttrProductName, g.ProductName)
	setString(logger, attrs, device.AttrBrand, g.Brand)
	setString(logger, attrs, device.AttrArchitecture, g.Architecture)
	setVersion(logger, attrs, device.AttrCUDAComputeCapability, g.CUDAComputeCapability)
	setVersion(logger, attrs, device.AttrDriverVersion, g.DriverVersion)
	setVersion(logger, attrs, device.AttrCUDADriverVersion, g.CUDADriverVersion)
	for _, attr := range standardAttributes(logger, g, opts.Sysfs) {
		attrs[attr.Name] = attr.Value
	}
	return attrs
}

// makeShareable adds allowMultipleAllocations and the request policies.
// memoryBytes is the published memory capacity (the card's unreserved
// memory). A claim that names no capacity gets the defaults: all of it
// rounded down to the step (so it holds the whole card) and no compute
// share (time-sliced). It reports false, and
// leaves the device whole-card only, when the card is too small for the
// policy the API accepts (min + step must fit into the capacity).
func makeShareable(logger klog.Logger, dev *resourceapi.Device, memoryBytes, step int64) bool {
	if memoryBytes < 2*step {
		logger.Info("GPU memory is smaller than two memory steps; publishing it as whole-card only",
			"memoryBytes", memoryBytes, "memoryStep", step)
		return false
	}
	// The range starts at 0, not at one step, for monitoring: the 1.37
	// allocator checks capacity also for admin-access requests on devices
	// that allow multiple allocations, so an admin claim asks for memory 0
	// to fit beside a card's holders. The plugin refuses a non-admin result
	// that consumed no memory (see driver.planClaim).
	usable := device.UsableMemory(memoryBytes, step)
	memory := dev.Capacity[device.CapacityMemory]
	memory.RequestPolicy = &resourceapi.CapacityRequestPolicy{
		Default: resource.NewQuantity(usable, resource.BinarySI),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min:  resource.NewQuantity(0, resource.BinarySI),
			Max:  resource.NewQuantity(usable, resource.BinarySI),
			Step: resource.NewQuantity(step, resource.BinarySI),
		},
	}
	dev.Capacity[device.CapacityMemory] = memory

	compute := dev.Capacity[device.CapacityCompute]
	compute.RequestPolicy = &resourceapi.CapacityRequestPolicy{
		Default: resource.NewQuantity(0, resource.DecimalSI),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{
			Min:  resource.NewQuantity(0, resource.DecimalSI),
			Max:  resource.NewQuantity(device.ComputeCapacity, resource.DecimalSI),
			Step: resource.NewQuantity(1, resource.DecimalSI),
		},
	}
	dev.Capacity[device.CapacityCompute] = compute
	dev.AllowMultipleAllocations = ptr.To(true)
	return true
}

// countPeers counts the distinct cards this one reaches directly.
func countPeers(g gpu.GPU) int {
	seen := make(map[int]bool, len(g.NVLinkPeers))
	for _, p := range g.NVLinkPeers {
		if p != g.Index {
			seen[p] = true
		}
	}
	return len(seen)
}

// setString sets a string attribute unless the card did not report it or
// the value is longer than the API allows.
func setString(logger klog.Logger, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName, value string) {
	switch {
	case value == "":
		logger.V(4).Info("GPU did not report a value; attribute left out", "attribute", name)
	case len(value) > resourceapi.DeviceAttributeMaxValueLength:
		logger.Info("Value longer than the API allows; attribute left out", "attribute", name, "value", value, "maxLength", resourceapi.DeviceAttributeMaxValueLength)
	default:
		attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(value)}
	}
}

// setVersion sets a version attribute when the reported value can be
// expressed as semver (see Semver).
func setVersion(logger klog.Logger, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName, value string) {
	if value == "" {
		logger.V(4).Info("GPU did not report a version; attribute left out", "attribute", name)
		return
	}
	v, err := Semver(value)
	if err != nil {
		logger.Info("Version cannot be published; attribute left out", "attribute", name, "err", err)
		return
	}
	attrs[name] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
}

// boundedValue keeps a generated string attribute within the API's length
// limit; an over-long value is shortened to a prefix plus a hash so it stays
// unique.
func boundedValue(s string) string {
	if len(s) <= resourceapi.DeviceAttributeMaxValueLength {
		return s
	}
	h := shortHash(s)
	return s[:resourceapi.DeviceAttributeMaxValueLength-len(h)-1] + "-" + h
}

// isDNSLabel reports whether a device name is acceptable to the API.
func isDNSLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

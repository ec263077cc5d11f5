// Package names holds the identifiers Tangram shares with the cluster: the DRA
// driver name, CDI kind, DeviceClass names and device attribute names. They
// are part of the user-facing API (CEL selectors, claims, CDI device IDs), so
// they live in one place and never change silently.
package device

const (
	// DriverName is the DRA driver name in ResourceSlices, claims and configs.
	DriverName = "gpu.tangram.dev"

	// CDIVendor and CDIClass form the CDI kind of our transient specs:
	// "k8s.gpu.tangram.dev/claim".
	CDIVendor = "k8s." + DriverName
	CDIClass  = "claim"
	CDIKind   = CDIVendor + "/" + CDIClass

	// DeviceClass names published by the Helm chart.
	DeviceClassName       = "gpu.tangram.dev"
	SharedDeviceClassName = "shared-gpu.tangram.dev"
	// HardSharedDeviceClassName is the strict shared class: only cards of
	// nodes whose shareEnforcement is "hard" and whose sharing backend is
	// mps. A tenant who must not share on an advisory node names it.
	HardSharedDeviceClassName = "hard-shared-gpu.tangram.dev"
)

// IsTangramClass reports whether name is one of the DeviceClasses the
// chart publishes.
func IsTangramClass(name string) bool {
	return name == DeviceClassName || IsSharedClass(name)
}

// IsSharedClass reports whether name is one of the chart's shared classes.
func IsSharedClass(name string) bool {
	return name == SharedDeviceClassName || name == HardSharedDeviceClassName
}

// Device attribute names, without the driver domain; in CEL they are written
// device.attributes["gpu.tangram.dev"].<name>.
const (
	AttrType                  = "type"
	AttrUUID                  = "uuid"
	AttrIndex                 = "index"
	AttrMinor                 = "minor"
	AttrProductName           = "productName"
	AttrBrand                 = "brand"
	AttrArchitecture          = "architecture"
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrCUDADriverVersion     = "cudaDriverVersion"
	AttrNVLinkDomain          = "nvlinkDomain"
	AttrNVLinkPeers           = "nvlinkPeers"
	AttrShareable             = "shareable"
	// AttrShareEnforcement says how hard the node enforces a share's limits:
	// "hard", "compute-only" or "advisory" (pkg/plugin/enforcement).
	AttrShareEnforcement = "shareEnforcement"
	// AttrShareBackend is the sharing backend the node's admin chose for
	// its shareable cards (--share-backend): "mps" or "none". The shared
	// classes select on it, so shares of different backends never meet on
	// one card; a card without it (a plugin before the attribute) counts
	// as "mps".
	AttrShareBackend = "shareBackend"

	// TypeGPU is the value of the "type" attribute of every device we publish.
	TypeGPU = "gpu"
)

// Capacity names. Memory is in bytes; compute is a percentage of the card's
// streaming multiprocessors (100 = the whole card).
const (
	CapacityMemory  = "memory"
	CapacityCompute = "compute"
)

// DevicePrefix + index is the ResourceSlice device name of a card: "gpu-0".
const DevicePrefix = "gpu-"

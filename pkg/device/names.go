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
)

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

//go:build cgo

package nvmlgpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// architectureNames are the lower-case names published in the
// "architecture" attribute. An architecture missing here (newer than this
// go-nvml) is logged and left out rather than guessed.
var architectureNames = map[nvml.DeviceArchitecture]string{
	nvml.DEVICE_ARCH_KEPLER:    "kepler",
	nvml.DEVICE_ARCH_MAXWELL:   "maxwell",
	nvml.DEVICE_ARCH_PASCAL:    "pascal",
	nvml.DEVICE_ARCH_VOLTA:     "volta",
	nvml.DEVICE_ARCH_TURING:    "turing",
	nvml.DEVICE_ARCH_AMPERE:    "ampere",
	nvml.DEVICE_ARCH_ADA:       "ada-lovelace",
	nvml.DEVICE_ARCH_HOPPER:    "hopper",
	nvml.DEVICE_ARCH_BLACKWELL: "blackwell",
}

// brandNames spell NVML's brand types the way NVIDIA's Kubernetes components
// publish them ("Nvidia", "Tesla", ...).
var brandNames = map[nvml.BrandType]string{
	nvml.BRAND_QUADRO:              "Quadro",
	nvml.BRAND_TESLA:               "Tesla",
	nvml.BRAND_NVS:                 "NVS",
	nvml.BRAND_GRID:                "Grid",
	nvml.BRAND_GEFORCE:             "GeForce",
	nvml.BRAND_TITAN:               "Titan",
	nvml.BRAND_NVIDIA_VAPPS:        "NvidiaVApps",
	nvml.BRAND_NVIDIA_VPC:          "NvidiaVPC",
	nvml.BRAND_NVIDIA_VCS:          "NvidiaVCS",
	nvml.BRAND_NVIDIA_VWS:          "NvidiaVWS",
	nvml.BRAND_NVIDIA_CLOUD_GAMING: "NvidiaCloudGaming",
	nvml.BRAND_QUADRO_RTX:          "QuadroRTX",
	nvml.BRAND_NVIDIA_RTX:          "NvidiaRTX",
	nvml.BRAND_NVIDIA:              "Nvidia",
	nvml.BRAND_GEFORCE_RTX:         "GeForceRTX",
	nvml.BRAND_TITAN_RTX:           "TitanRTX",
}

// returnNames spell NVML's return codes as nvml.h names them, so that a
// record reads the same whichever library's nvmlErrorString answered.
var returnNames = map[nvml.Return]string{
	nvml.SUCCESS:                         "SUCCESS",
	nvml.ERROR_UNINITIALIZED:             "ERROR_UNINITIALIZED",
	nvml.ERROR_INVALID_ARGUMENT:          "ERROR_INVALID_ARGUMENT",
	nvml.ERROR_NOT_SUPPORTED:             "ERROR_NOT_SUPPORTED",
	nvml.ERROR_NO_PERMISSION:             "ERROR_NO_PERMISSION",
	nvml.ERROR_NOT_FOUND:                 "ERROR_NOT_FOUND",
	nvml.ERROR_INSUFFICIENT_RESOURCES:    "ERROR_INSUFFICIENT_RESOURCES",
	nvml.ERROR_INSUFFICIENT_SIZE:         "ERROR_INSUFFICIENT_SIZE",
	nvml.ERROR_FUNCTION_NOT_FOUND:        "ERROR_FUNCTION_NOT_FOUND",
	nvml.ERROR_ARGUMENT_VERSION_MISMATCH: "ERROR_ARGUMENT_VERSION_MISMATCH",
	nvml.ERROR_GPU_IS_LOST:               "ERROR_GPU_IS_LOST",
	nvml.ERROR_IN_USE:                    "ERROR_IN_USE",
	nvml.ERROR_UNKNOWN:                   "ERROR_UNKNOWN",
}

// ReturnName is ret as nvml.h names it, or its number and message.
func ReturnName(ret nvml.Return) string {
	if n, ok := returnNames[ret]; ok {
		return n
	}
	return fmt.Sprintf("%d (%s)", int32(ret), ret.Error())
}

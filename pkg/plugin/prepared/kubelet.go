package prepared

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// The CDI device names of a prepared claim live here, next to the record
// whose IDs they are: the CDI package names the devices of a spec with
// them, and KubeletDevices names the claim-wide one.

// ClaimWideRequest is the request name the plugin gives the kubelet for a
// claim's claim-wide CDI device (see cdi.ComputeClaimEdits). It contains a
// dot, so it is never the name of a request (a DNS label): the kubelet
// injects the device only into containers that name the claim without a
// request.
const ClaimWideRequest = "tangram.whole-claim"

const cdiDeviceNameSeparator = "-"

// CDIDeviceName is the CDI device name of a result, reduced to the
// characters CDI allows (letters, digits, '_', '-', '.', ':'); others
// become '_'.
func CDIDeviceName(claimUID, device, shareID string) string {
	name := claimUID + cdiDeviceNameSeparator + device
	if shareID != "" {
		name += cdiDeviceNameSeparator + shareID
	}
	return strings.Map(func(r rune) rune {
		if cdiparser.IsAlphaNumeric(r) || r == '_' || r == '-' || r == '.' || r == ':' {
			return r
		}
		return '_'
	}, name)
}

// CDIDeviceID is the fully qualified CDI ID of a device name.
func CDIDeviceID(name string) string {
	return cdiparser.QualifiedName(device.CDIVendor, device.CDIClass, name)
}

// ClaimWideDeviceName is the CDI device name of a claim's claim-wide device.
func ClaimWideDeviceName(claimUID string) string {
	return CDIDeviceName(claimUID, "claim", "")
}

// NeedsClaimWideDevice reports whether results of these requests need a
// claim-wide device: only when they come from more than one request, since
// with one request the request's view is the claim's.
func NeedsClaimWideDevice(requests []string) bool {
	for _, r := range requests {
		if BaseRequest(r) != BaseRequest(requests[0]) {
			return true
		}
	}
	return false
}

// BaseRequest is the request a result belongs to for the kubelet: a
// subrequest "req/sub" counts as "req".
func BaseRequest(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// KubeletDevices is what the kubelet gets for the completed claim; pool is
// the node's resource pool, which every result of the claim is in.
func (c Claim) KubeletDevices(pool string) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(c.Devices))
	for _, dev := range c.Devices {
		kd := kubeletplugin.Device{
			Requests:     []string{dev.Request},
			PoolName:     pool,
			DeviceName:   dev.Device,
			CDIDeviceIDs: dev.CDIDeviceIDs,
		}
		if dev.ShareID != "" {
			shareID := types.UID(dev.ShareID)
			kd.ShareID = &shareID
		}
		out = append(out, kd)
	}
	// A claim of several requests has a claim-wide CDI device (see
	// cdi.ComputeClaimEdits). It comes last, so its lists win in a
	// container that names the whole claim, and it is tied to a request
	// name no request can have, so containers naming requests never get it.
	requests := make([]string, len(c.Devices))
	for i, dev := range c.Devices {
		requests[i] = dev.Request
	}
	if len(c.Devices) > 0 && NeedsClaimWideDevice(requests) {
		last := c.Devices[len(c.Devices)-1]
		out = append(out, kubeletplugin.Device{
			Requests:     []string{ClaimWideRequest},
			PoolName:     pool,
			DeviceName:   last.Device,
			CDIDeviceIDs: []string{CDIDeviceID(ClaimWideDeviceName(c.UID))},
		})
	}
	return out
}

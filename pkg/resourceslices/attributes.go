package resourceslices

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Semver turns a dotted numeric version as NVIDIA reports it into the
// semver 2.0 form the API requires for version attributes:
//
//	"9.0" -> "9.0.0", "12" -> "12.0.0", "580.95.05" -> "580.95.5",
//	"525.85.12.01" -> "525.85.12+01".
//
// Leading zeros are dropped because semver forbids them (numerically the
// value is the same); a fourth and later component becomes build metadata,
// which keeps it visible but, as semver says, outside comparisons. Anything
// else (letters, empty parts, pre-releases) is an error.
func Semver(v string) (string, error) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	core := make([]string, 3)
	for i := range core {
		core[i] = "0"
	}
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", fmt.Errorf("version %q is not dot-separated numbers", v)
		}
		if i >= 3 {
			continue
		}
		n, err := strconv.ParseUint(p, 10, 63)
		if err != nil {
			return "", fmt.Errorf("version %q: component %q is too large", v, p)
		}
		core[i] = strconv.FormatUint(n, 10)
	}
	out := strings.Join(core, ".")
	if len(parts) > 3 {
		out += "+" + strings.Join(parts[3:], ".")
	}
	if len(out) > resourceapi.DeviceAttributeMaxValueLength {
		return "", fmt.Errorf("version %q is longer than %d characters", v, resourceapi.DeviceAttributeMaxValueLength)
	}
	return out, nil
}

// standardAttributes derives the resource.kubernetes.io attributes through
// the deviceattribute helpers. Each is optional: a value that cannot be
// derived is logged and left out.
func standardAttributes(logger klog.Logger, g gpu.GPU, sysfs fs.ReadLinkFS) []deviceattribute.DeviceAttribute {
	var out []deviceattribute.DeviceAttribute
	if g.PCIBusID != "" {
		busID := canonicalPCIBusID(g.PCIBusID)
		if attr, err := deviceattribute.GetPCIBusIDAttribute(busID); err != nil {
			logger.Info("PCI bus ID cannot be published; pciBusID and pcieRoot left out", "pciBusID", g.PCIBusID, "err", err)
		} else {
			out = append(out, attr)
			if sysfs != nil {
				if attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFS(sysfs)); err != nil {
					logger.Info("PCIe root cannot be resolved; pcieRoot left out", "pciBusID", busID, "err", err)
				} else {
					out = append(out, attr)
				}
			}
		}
	}
	if g.NUMANode != nil {
		if attr, err := deviceattribute.GetNUMANodeAttribute(*g.NUMANode, deviceattribute.ScalarAttribute); err != nil {
			logger.Info("NUMA node cannot be published; numaNode left out", "numaNode", *g.NUMANode, "err", err)
		} else {
			out = append(out, attr)
		}
	}
	return out
}

// canonicalPCIBusID brings NVML's form ("00000000:18:00.0", upper case) to
// the one the standard attribute uses ("0000:18:00.0").
func canonicalPCIBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if domain, rest, ok := strings.Cut(s, ":"); ok && len(domain) == 8 && strings.HasPrefix(domain, "0000") {
		s = domain[4:] + ":" + rest
	}
	return s
}

var notIdentifierChar = regexp.MustCompile(`[^A-Za-z0-9_]`)

// LabelAttributeName returns the device attribute a node label is copied
// into. The label's prefix stays the attribute's domain, so
// "topology.kubernetes.io/zone" is read in CEL as
// device.attributes["topology.kubernetes.io"].zone and other drivers that
// copy the same label produce the same, comparable attribute. A label
// without prefix lands in the driver's domain ("rack" ->
// device.attributes["gpu.tangram.dev"].rack). Characters a C identifier
// cannot hold become "_" ("instance-type" -> "instance_type"), and a leading
// digit gets a "_" in front.
//
// The result is unqualified for the driver's own domain, as device
// attributes of the driver are conventionally written.
func LabelAttributeName(key string) (resourceapi.QualifiedName, error) {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return "", fmt.Errorf("node label key %q is not a valid label key: %s", key, strings.Join(errs, "; "))
	}
	domain, name, hasDomain := strings.Cut(key, "/")
	if !hasDomain {
		name, domain = domain, ""
	}
	id := notIdentifierChar.ReplaceAllString(name, "_")
	if id[0] >= '0' && id[0] <= '9' {
		id = "_" + id
	}
	if len(id) > resourceapi.DeviceMaxIDLength {
		return "", fmt.Errorf("node label key %q gives attribute name %q, longer than the %d characters the API allows; copy a label with a shorter name",
			key, id, resourceapi.DeviceMaxIDLength)
	}
	if domain == "" || domain == device.DriverName {
		return resourceapi.QualifiedName(id), nil
	}
	if len(domain) > resourceapi.DeviceMaxDomainLength {
		return "", fmt.Errorf("node label key %q has prefix %q, longer than the %d characters the API allows for an attribute domain; copy a label with a shorter prefix",
			key, domain, resourceapi.DeviceMaxDomainLength)
	}
	return resourceapi.QualifiedName(domain + "/" + id), nil
}

// builtinAttributes are the names label attributes must not take.
var builtinAttributes = map[resourceapi.QualifiedName]bool{
	device.AttrType: true, device.AttrUUID: true, device.AttrIndex: true, device.AttrMinor: true,
	device.AttrProductName: true, device.AttrBrand: true, device.AttrArchitecture: true,
	device.AttrCUDAComputeCapability: true, device.AttrDriverVersion: true, device.AttrCUDADriverVersion: true,
	device.AttrNVLinkDomain: true, device.AttrNVLinkPeers: true, device.AttrShareable: true, device.AttrShareEnforcement: true, device.AttrShareEnforcementReason: true,
	device.AttrShareBackend:                         true,
	deviceattribute.StandardDeviceAttributePCIBusID: true,
	deviceattribute.StandardDeviceAttributePCIeRoot: true,
	deviceattribute.StandardDeviceAttributeNUMANode: true,
}

// labelAttributes checks every requested label key (present on the node or
// not, so a misconfiguration shows at once) and returns the attributes of
// the labels the node has.
func labelAttributes(keys []string, labels map[string]string) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(keys))
	fromKey := make(map[resourceapi.QualifiedName]string, len(keys))
	for _, key := range keys {
		name, err := LabelAttributeName(key)
		if err != nil {
			return nil, err
		}
		if builtinAttributes[name] {
			return nil, fmt.Errorf("node label key %q would become attribute %q, which Tangram already publishes; copy a different label", key, name)
		}
		if other, ok := fromKey[name]; ok {
			if other == key {
				continue
			}
			return nil, fmt.Errorf("node label keys %q and %q both become attribute %q; copy only one of them", other, key, name)
		}
		fromKey[name] = key
		if value, ok := labels[key]; ok {
			out[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(value)}
		}
	}
	return out, nil
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

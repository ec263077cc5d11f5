package gpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// pciBusIDForm accepts the Linux sysfs form ("0000:18:00.0") and NVML's
// ("00000000:18:00.0"), in either case.
var pciBusIDForm = regexp.MustCompile(`^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// NormalizePCIBusID returns the canonical lower-case sysfs form of a PCI bus
// ID, "0000:18:00.0", the form resource.kubernetes.io/pciBusID expects. It
// accepts NVML's eight-digit domain ("00000000:18:00.0") and upper case.
func NormalizePCIBusID(s string) (string, error) {
	m := pciBusIDForm.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", fmt.Errorf("%q is not a PCI bus ID (use domain:bus:device.function, e.g. \"0000:18:00.0\")", s)
	}
	domain, err := strconv.ParseUint(m[1], 16, 32)
	if err != nil {
		return "", fmt.Errorf("%q is not a PCI bus ID: domain %q: %w", s, m[1], err)
	}
	device, _ := strconv.ParseUint(m[3], 16, 8) // two hex digits always parse
	if device > 0x1f {
		return "", fmt.Errorf("%q is not a PCI bus ID: device %s is above 1f", s, m[3])
	}
	return fmt.Sprintf("%04x:%s:%s.%s", domain, strings.ToLower(m[2]), strings.ToLower(m[3]), m[4]), nil
}

package gpucheck

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpu/nvcaps"
)

// MIGCapsReading is what the probe read, without changing anything, of the
// NVIDIA kernel module's MIG capability files, for MIGCapsOutcome.
type MIGCapsReading struct {
	// MIGMinors and Devices are /proc/driver/nvidia-caps/mig-minors and
	// /proc/devices, with the error of reading each.
	MIGMinors    []byte
	MIGMinorsErr error
	Devices      []byte
	DevicesErr   error
	// CapFiles are /proc/driver/nvidia/capabilities/mig/<cap> for config
	// and monitor; CapFileErrs their read errors.
	CapFiles    map[nvcaps.Cap][]byte
	CapFileErrs map[nvcaps.Cap]error
	// Nodes are the entries of /dev/nvidia-caps, by path.
	Nodes map[string]CapNode
	// Card0Minor is the device minor of NVML's card 0; nil: no card.
	Card0Minor *int
}

// CapNode is one entry of /dev/nvidia-caps.
type CapNode struct {
	Char         bool
	Major, Minor uint32
}

// MIGCapsOutcome judges whether the plugin's reading of the MIG capability
// files (pkg/gpu/nvcaps, which builds a MIG device's CDI nodes) holds on
// this node: both files parse; config's and monitor's minors in
// mig-minors are the DeviceFileMinor of their capability files and, where
// their /dev/nvidia-caps nodes exist, those nodes' minors, with the
// nvidia-caps major of /proc/devices; card 0's GPU instance 0 is listed at
// the minor the mock's layout gives (nvcaps.FormulaMinors). Whether the
// whole file is the mock's (nvcaps.GenerateMIGMinors) byte for byte is
// noted, not judged: another driver may list more cards or instances.
func MIGCapsOutcome(r MIGCapsReading) Outcome {
	if errors.Is(r.MIGMinorsErr, fs.ErrNotExist) {
		return Skip("no /proc/driver/nvidia-caps/mig-minors: the NVIDIA kernel module publishes it from R450 on (%v)", r.MIGMinorsErr)
	}
	if r.MIGMinorsErr != nil {
		return Fail("reading mig-minors: %v", r.MIGMinorsErr)
	}
	if r.DevicesErr != nil {
		return Fail("reading /proc/devices: %v", r.DevicesErr)
	}
	minors, err := nvcaps.ParseMIGMinors(r.MIGMinors)
	if err != nil {
		return Fail("%v", err)
	}
	devices, err := nvcaps.ParseDevices(r.Devices)
	if err != nil {
		return Fail("%v", err)
	}
	major, err := devices.CharMajor(nvcaps.CapsDeviceName)
	if err != nil {
		return Fail("%v", err)
	}
	notes := []string{fmt.Sprintf("mig-minors lists %d capabilities; nvidia-caps major %d", len(minors), major)}
	var problems []string
	for _, c := range []nvcaps.Cap{nvcaps.ConfigCap, nvcaps.MonitorCap} {
		minor, err := minors.Minor(c)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if err := r.CapFileErrs[c]; err != nil {
			problems = append(problems, fmt.Sprintf("capability file mig/%s: %v", c, err))
		} else if f, err := nvcaps.ParseCapabilityFile(r.CapFiles[c]); err != nil {
			problems = append(problems, fmt.Sprintf("capability file mig/%s: %v", c, err))
		} else if f.DeviceFileMinor != minor {
			problems = append(problems, fmt.Sprintf("%s: mig-minors says minor %d, capabilities/mig/%s DeviceFileMinor %d", c, minor, c, f.DeviceFileMinor))
		}
		path := nvcaps.DevicePath(minor)
		n, ok := r.Nodes[path]
		switch {
		case !ok:
			notes = append(notes, fmt.Sprintf("%s: minor %d, no %s on this node (nothing created it)", c, minor, path))
		case !n.Char:
			problems = append(problems, fmt.Sprintf("%s: %s is not a character device", c, path))
		case n.Major != major || n.Minor != minor:
			problems = append(problems, fmt.Sprintf("%s: %s is %d:%d, want %d:%d (nvidia-caps major, mig-minors minor)", c, path, n.Major, n.Minor, major, minor))
		default:
			notes = append(notes, fmt.Sprintf("%s: minor %d, %s is %d:%d", c, minor, path, n.Major, n.Minor))
		}
	}
	if r.Card0Minor == nil {
		notes = append(notes, "no card: GPU instance minors not checked")
	} else {
		g := *r.Card0Minor
		want, _ := nvcaps.FormulaMinors(g, 0, 0)
		c := nvcaps.GPUInstanceCap(g, 0)
		got, err := minors.Minor(c)
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case got != want:
			// The plugin reads the minor from the file; only the mock's
			// fidelity is at stake.
			notes = append(notes, fmt.Sprintf("%s is minor %d where the mock's layout gives %d: the mock driver root differs from this driver", c, got, want))
		default:
			notes = append(notes, fmt.Sprintf("%s: minor %d as the mock's layout gives", c, got))
		}
	}
	if bytes.Equal(r.MIGMinors, nvcaps.GenerateMIGMinors()) {
		notes = append(notes, "mig-minors is the mock driver root's byte for byte")
	} else {
		notes = append(notes, "mig-minors differs from the mock driver root's (nvcaps.GenerateMIGMinors)")
	}
	if len(problems) > 0 {
		return Fail("%s (%s)", strings.Join(problems, "; "), strings.Join(notes, "; "))
	}
	return Pass("%s", strings.Join(notes, "; "))
}

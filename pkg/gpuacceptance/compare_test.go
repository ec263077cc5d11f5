package gpuacceptance

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/device"
)

// h100 is a device as the plugin publishes a card that nvidia-smi reports
// as in testdata/nvidia-smi-2xh100.xml.
func h100(index int64, uuid, bus string) resourceapi.Device {
	return resourceapi.Device{
		Name: "gpu-" + string(rune('0'+index)),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			device.AttrUUID:                                 {StringValue: ptr.To(uuid)},
			device.AttrProductName:                          {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			device.AttrArchitecture:                         {StringValue: ptr.To("hopper")},
			device.AttrMinor:                                {IntValue: ptr.To(index)},
			device.AttrDriverVersion:                        {VersionValue: ptr.To("580.95.5")},
			deviceattribute.StandardDeviceAttributePCIBusID: {StringValue: ptr.To(bus)},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			device.CapacityMemory: {Value: *resource.NewQuantity(81559<<20, resource.BinarySI)},
		},
	}
}

func matchingDevices() []resourceapi.Device {
	return []resourceapi.Device{
		h100(0, "GPU-aaaaaaaa-0000-0000-0000-000000000000", "0000:1b:00.0"),
		h100(1, "GPU-bbbbbbbb-0000-0000-0000-000000000000", "0000:43:00.0"),
	}
}

func loadSMI(t *testing.T) SMIReport {
	t.Helper()
	f, err := os.Open("testdata/nvidia-smi-2xh100.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	smi, err := ParseSMI(f)
	if err != nil {
		t.Fatal(err)
	}
	return smi
}

func TestCompare(t *testing.T) {
	smi := loadSMI(t)
	tests := []struct {
		name string
		edit func([]resourceapi.Device) []resourceapi.Device
		// failures are "card field" pairs expected to fail; all others pass.
		failures []string
	}{
		{name: "plugin and nvidia-smi agree", edit: func(d []resourceapi.Device) []resourceapi.Device { return d }},
		{name: "other product name", edit: func(d []resourceapi.Device) []resourceapi.Device {
			d[1].Attributes[device.AttrProductName] = resourceapi.DeviceAttribute{StringValue: ptr.To("NVIDIA H100 PCIe")}
			return d
		}, failures: []string{"GPU-bbbbbbbb-0000-0000-0000-000000000000 productName"}},
		{name: "one MiB less memory", edit: func(d []resourceapi.Device) []resourceapi.Device {
			d[0].Capacity[device.CapacityMemory] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(81558<<20, resource.BinarySI)}
			return d
		}, failures: []string{"GPU-aaaaaaaa-0000-0000-0000-000000000000 memory (MiB)"}},
		{name: "no bus ID published", edit: func(d []resourceapi.Device) []resourceapi.Device {
			delete(d[0].Attributes, deviceattribute.StandardDeviceAttributePCIBusID)
			return d
		}, failures: []string{"GPU-aaaaaaaa-0000-0000-0000-000000000000 pciBusID"}},
		{name: "other driver version", edit: func(d []resourceapi.Device) []resourceapi.Device {
			d[0].Attributes[device.AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: ptr.To("580.95.6")}
			return d
		}, failures: []string{"GPU-aaaaaaaa-0000-0000-0000-000000000000 driverVersion"}},
		{name: "card not published", edit: func(d []resourceapi.Device) []resourceapi.Device { return d[:1] },
			failures: []string{"node cards", "GPU-bbbbbbbb-0000-0000-0000-000000000000 published"}},
		{name: "card nvidia-smi does not list", edit: func(d []resourceapi.Device) []resourceapi.Device {
			return append(d, h100(2, "GPU-cccccccc-0000-0000-0000-000000000000", "0000:52:00.0"))
		}, failures: []string{"node cards", "GPU-cccccccc-0000-0000-0000-000000000000 published"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checks := Compare(tc.edit(matchingDevices()), smi)
			var failed []string
			for _, c := range checks {
				if !c.OK {
					failed = append(failed, c.Card+" "+c.Field)
				}
			}
			if strings.Join(failed, ",") != strings.Join(tc.failures, ",") {
				t.Errorf("failed checks %q, want %q", failed, tc.failures)
			}
			// Six values of each of the two cards, plus the card count.
			if want := 1 + 6*2; len(tc.failures) == 0 && len(checks) != want {
				t.Errorf("%d checks, want %d", len(checks), want)
			}
		})
	}
}

func TestNormalisation(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{name: "bus ID", got: normalBusID("00000000:1B:00.0"), want: "0000:1b:00.0"},
		{name: "bus ID with a domain", got: normalBusID("00000001:C3:00.0"), want: "0001:c3:00.0"},
		{name: "architecture with a space", got: normalArchitecture("Ada Lovelace"), want: "ada-lovelace"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if !sameVersion("580.95.5", "580.95.05") || sameVersion("580.95.5", "580.95.50") || sameVersion("", "") {
		t.Error("sameVersion must compare by number and refuse empty versions")
	}
}

func TestParse(t *testing.T) {
	smi := loadSMI(t)
	if smi.DriverVersion != "580.95.05" || len(smi.Cards) != 2 || smi.Cards[1].PCIBusID != "00000000:43:00.0" || smi.Cards[0].MemoryTotal != "81559 MiB" {
		t.Errorf("parsed %+v", smi)
	}
	if _, err := ParseSMI(strings.NewReader("<nvidia_smi_log><driver_version>1</driver_version></nvidia_smi_log>")); err == nil || !strings.Contains(err.Error(), "no GPU") {
		t.Errorf("a log without cards: err = %v", err)
	}
	if _, err := ParseSMI(strings.NewReader("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")); err == nil {
		t.Error("nvidia-smi's error text was accepted as XML")
	}

	// The List that `dra-kubelet-plugin slices -o json` prints.
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []resourceapi.ResourceSlice{
		{Spec: resourceapi.ResourceSliceSpec{Devices: matchingDevices()[:1]}},
		{Spec: resourceapi.ResourceSliceSpec{Devices: matchingDevices()[1:]}},
	}}
	data, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := ParseSlices(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 2 || devices[1].Name != "gpu-1" {
		t.Errorf("devices = %+v", devices)
	}
	if _, err := ParseSlices(strings.NewReader("Error: opening NVML")); err == nil {
		t.Error("the plugin's error text was accepted as JSON")
	}
}

func TestWriteReport(t *testing.T) {
	var buf bytes.Buffer
	failed := WriteReport(&buf, []Check{
		{Card: "node", Field: "cards", Plugin: "2", SMI: "2", OK: true},
		{Card: "GPU-a", Field: "memory (MiB)", Plugin: "81558", SMI: "81559 MiB"},
	})
	if failed != 1 {
		t.Errorf("failed = %d, want 1", failed)
	}
	out := buf.String()
	for _, want := range []string{"ok     node", "FAIL   GPU-a", "81559 MiB", "1 of 2 checks failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestCompareReservedMemory: where nvidia-smi reports the memory the
// driver reserves, the published memory is the total less it
// (docs/resourceslices.md), within the one MiB the two roundings down to
// MiB can differ by; the total itself is then wrong.
func TestCompareReservedMemory(t *testing.T) {
	smi := loadSMI(t)
	smi.Cards[0].MemoryReserved = "329 MiB"
	for _, tt := range []struct {
		mib  int64
		want bool
	}{{81559 - 329, true}, {81559 - 330, true}, {81559 - 331, false}, {81559, false}} {
		d := matchingDevices()
		found := false
		d[0].Capacity[device.CapacityMemory] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(tt.mib<<20, resource.BinarySI)}
		for _, c := range Compare(d, smi) {
			if c.Card != smi.Cards[0].UUID || c.Field != "memory (MiB)" {
				continue
			}
			found = true
			if c.OK != tt.want {
				t.Errorf("published %d MiB against %s: ok %v, want %v", tt.mib, c.SMI, c.OK, tt.want)
			}
		}
		if !found {
			t.Errorf("no memory check of %s", smi.Cards[0].UUID)
		}
	}
}

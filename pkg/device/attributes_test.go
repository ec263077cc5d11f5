package device

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

func TestAttributes(t *testing.T) {
	d := resourceapi.Device{Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrUUID:                                 {StringValue: ptr.To("GPU-a")},
		DriverName + "/" + AttrProductName:       {StringValue: ptr.To("NVIDIA H100")},
		AttrMIGProfileID:                         {IntValue: ptr.To[int64](19)},
		DriverName + "/" + AttrMIGPlacementStart: {IntValue: ptr.To[int64](6)},
	}}
	if got := StringAttribute(d, AttrUUID); got != "GPU-a" {
		t.Errorf("bare name: %q", got)
	}
	if got := StringAttribute(d, AttrProductName); got != "NVIDIA H100" {
		t.Errorf("qualified name: %q", got)
	}
	if got := StringAttribute(d, AttrType); got != "" {
		t.Errorf("absent: %q", got)
	}
	if got := IntAttribute(d, AttrMIGProfileID); got != 19 {
		t.Errorf("int: %d", got)
	}
	// Int attributes are read under their bare name only, as this driver
	// publishes them.
	if got := IntAttribute(d, AttrMIGPlacementStart); got != -1 {
		t.Errorf("qualified int: %d, want -1", got)
	}
	if got := IntAttribute(d, AttrUUID); got != -1 {
		t.Errorf("string read as int: %d, want -1", got)
	}
}

package migpartition

import (
	"strings"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// TestMIGCardByRecordedUUID: a MIG device's card is the one with the
// recorded UUID, wherever its index now is; a card gone from the node is
// an error naming it, not a zero card.
func TestMIGCardByRecordedUUID(t *testing.T) {
	a := gpu.GPU{Index: 0, UUID: "GPU-a"}
	b := gpu.GPU{Index: 1, UUID: "GPU-b"}
	p := &Partitions{cards: map[string]gpu.GPU{device.CardDeviceName(0): b, device.CardDeviceName(1): a}}
	for _, tt := range []struct {
		uuid    string
		want    gpu.GPU
		wantErr string
	}{
		{uuid: "GPU-a", want: a},
		{uuid: "GPU-b", want: b},
		{uuid: "GPU-gone", wantErr: "GPU-gone"},
	} {
		dev := prepared.Device{Device: device.MIGDeviceName(0, 19, 0), GPUUUID: tt.uuid, MIG: &prepared.MIG{ParentIndex: 0}}
		got, err := p.migCard(dev)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: %+v %v, want an error naming %s", tt.uuid, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.UUID != tt.want.UUID || got.Index != tt.want.Index {
			t.Errorf("%s: %+v %v, want %+v", tt.uuid, got, err, tt.want)
		}
	}
}

//go:build cgo

package sharing

import (
	"context"
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

func TestNVMLComputeModeSetter(t *testing.T) {
	server := dgxa100.New()
	var calls []nvml.ComputeMode
	card := server.Devices[3].(*dgxa100.Device)
	card.SetComputeModeFunc = func(mode nvml.ComputeMode) nvml.Return {
		calls = append(calls, mode)
		return nvml.SUCCESS
	}
	busy := server.Devices[4].(*dgxa100.Device)
	busy.SetComputeModeFunc = func(nvml.ComputeMode) nvml.Return { return nvml.ERROR_NO_PERMISSION }

	setter := &NVMLComputeModeSetter{Lib: server}
	ctx := context.Background()
	if err := setter.SetComputeMode(ctx, card.UUID, ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if err := setter.SetComputeMode(ctx, card.UUID, ComputeModeDefault); err != nil {
		t.Fatal(err)
	}
	if want := []nvml.ComputeMode{nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.COMPUTEMODE_DEFAULT}; !reflect.DeepEqual(calls, want) {
		t.Errorf("NVML calls %v, want %v", calls, want)
	}

	tests := []struct {
		uuid    string
		mode    ComputeMode
		wantErr string
	}{
		{"GPU-missing", ComputeModeDefault, "finding card GPU-missing in NVML: ERROR_INVALID_ARGUMENT"},
		{busy.UUID, ComputeModeExclusiveProcess, "setting compute mode of " + busy.UUID + " to ExclusiveProcess: ERROR_NO_PERMISSION"},
		{card.UUID, "Prohibited", `setting compute mode of ` + card.UUID + `: unknown mode "Prohibited"`},
	}
	for _, tt := range tests {
		err := setter.SetComputeMode(ctx, tt.uuid, tt.mode)
		if got := errString(err); got != tt.wantErr {
			t.Errorf("SetComputeMode(%s, %s) error %q, want %q", tt.uuid, tt.mode, got, tt.wantErr)
		}
	}
}

//go:build cgo

package daemon

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
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
		if got := fmt.Sprint(err); err != nil && got != tt.wantErr || err == nil && tt.wantErr != "" {
			t.Errorf("SetComputeMode(%s, %s) error %q, want %q", tt.uuid, tt.mode, got, tt.wantErr)
		}
	}
}

// mockNVMLSetter is a compute-mode setter over the C mock libnvidia-ml.so.1
// serving the built-in dgx-h100 of node mock-node, and the mock's state
// (calls.log) for this test.
func mockNVMLSetter(t *testing.T) (ComputeModeSetter, mocknvml.State) {
	t.Helper()
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	state := mocknvml.UseBuiltIn(t)
	setter, err := NewNVMLComputeModeSetter(lib)
	if err != nil {
		t.Fatal(err)
	}
	// go-nvml words errors with the loaded library's nvmlErrorString until
	// NVML is shut down; the dgxa100 test above wants its own wording.
	t.Cleanup(func() { _ = setter.(*NVMLComputeModeSetter).Lib.Shutdown() })
	return setter, state
}

// TestNVMLComputeModeSetterOnMockLibrary goes through go-nvml and the C mock
// libnvidia-ml.so.1, as the plugin does on a mock driver root: the mode
// switch reaches the library's call log.
func TestNVMLComputeModeSetterOnMockLibrary(t *testing.T) {
	setter, state := mockNVMLSetter(t)
	uuid := fakegpu.FakeGPUUUID("mock-node", 2)
	ctx := context.Background()
	if err := setter.SetComputeMode(ctx, uuid, ComputeModeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if err := setter.SetComputeMode(ctx, "GPU-unknown", ComputeModeDefault); err == nil || !strings.Contains(err.Error(), "finding card GPU-unknown in NVML: Not Found") {
		t.Errorf("unknown card: %v, want NVML's Not Found", err)
	}
	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].String() != "nvmlDeviceSetComputeMode index=2 uuid="+uuid+" mode=EXCLUSIVE_PROCESS" {
		t.Errorf("calls.log: %v", calls)
	}
	if _, err := NewNVMLComputeModeSetter(""); err == nil {
		t.Error("a setter without library path was created")
	}
}

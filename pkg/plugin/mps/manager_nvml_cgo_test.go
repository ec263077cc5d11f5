//go:build cgo

package mps

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest/controlbin"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// TestManagerOnMockDriver is a share's life on a GPU node, with the driver
// replaced by its mocks: the C NVML library records the compute modes and the
// stand-in nvidia-cuda-mps-control, run by ProcessDaemon, records the commands.
func TestManagerOnMockDriver(t *testing.T) {
	lib, err := mocknvml.Build("")
	if err != nil {
		t.Fatal(err)
	}
	state := mocknvml.UseBuiltIn(t)
	setter, err := daemon.NewNVMLComputeModeSetter(lib)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = setter.(*daemon.NVMLComputeModeSetter).Lib.Shutdown() })
	layout := daemon.Layout{Root: mpstest.ShortRoot(t)}
	card1, card2 := fakegpu.FakeGPUUUID("mock-node", 1), fakegpu.FakeGPUUUID("mock-node", 2)
	d := daemon.NewProcessDaemon(daemon.ProcessDaemonConfig{Layout: layout, Binary: controlbin.StandInBinary, VisibleDevices: []string{card1, card2}})
	// The stand-in is a separate process that may take longer than the
	// default one-second wait to answer under the race detector; this test is
	// about what reaches the driver, not about the retryable not-ready answer.
	m := NewManager(layout, d, setter, []string{card1, card2}, WithTiming(Timing{ReadyWait: time.Minute}))
	ctx := context.Background()

	if err := m.Acquire(ctx, "claim-a", cardShares(card2)); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, "claim-a"); err != nil {
		t.Fatal(err)
	}
	// The last release stops the daemon in the background.
	waitIdle(t, m)
	calls, err := state.Calls()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.String())
	}
	want := []string{
		"nvmlDeviceSetComputeMode index=2 uuid=" + card2 + " mode=EXCLUSIVE_PROCESS",
		"nvmlDeviceSetComputeMode index=2 uuid=" + card2 + " mode=DEFAULT",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("calls.log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	commands, err := standin.Commands(layout.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(commands) < 2 || commands[0] != "get_server_list" || commands[len(commands)-1] != "quit" {
		t.Errorf("the MPS daemon got %q, want readiness probes and a final quit", commands)
	}
}

//go:build cgo

package nvmlgpu

import (
	"context"
	"reflect"
	"testing"

	mocknvml "github.com/tangram-gpu/tangram/hack/mock-nvml"
	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
)

// TestEnforcementFactsOverMockLibrary: what share enforcement detection asks
// NVML, answered by the C mock of a 580 driver: no memory limit symbol (the
// lookup must not call it), and the cards whose MIG mode is on; cards never
// set are not MIG-capable (NOT_SUPPORTED), which is not MIG mode.
func TestEnforcementFactsOverMockLibrary(t *testing.T) {
	p, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	state := mocknvml.UseProfile(t, p, "node-a")
	ctx := context.Background()
	src, done, err := Open(ctx, mockLibraryPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	s := src.(*source)
	if s.HasMemoryLimitsSymbol() {
		t.Error("HasMemoryLimitsSymbol on a 580 library = true, want false")
	}
	if got, err := s.MIGEnabled(ctx); err != nil || len(got) != 0 {
		t.Errorf("MIGEnabled with no card in MIG mode = %v, %v", got, err)
	}
	on := fakegpu.FakeGPUUUID("node-a", 3)
	if err := state.SetMigMode(fakegpu.FakeGPUUUID("node-a", 1), false); err != nil {
		t.Fatal(err)
	}
	if err := state.SetMigMode(on, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.MIGEnabled(ctx); err != nil || !reflect.DeepEqual(got, []string{on}) {
		t.Errorf("MIGEnabled = %v, %v; want [%s]", got, err, on)
	}
}

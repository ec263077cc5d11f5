//go:build cgo

package nvmlgpu

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// capturedLogs records every log line (verbosity up to 2) so tests can check
// that odd values are reported, not silently dropped.
type capturedLogs struct {
	mu    sync.Mutex
	lines []string
}

func logContext() (context.Context, *capturedLogs) {
	logs := &capturedLogs{}
	logger := funcr.New(func(prefix, args string) {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		logs.lines = append(logs.lines, args)
	}, funcr.Options{Verbosity: 2})
	return klog.NewContext(context.Background(), logger), logs
}

// missing returns the wants (each a set of fragments that must appear
// together in one line) that no log line satisfies.
func (c *capturedLogs) missing(wants [][]string) [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]string
	for _, want := range wants {
		found := false
		for _, line := range c.lines {
			all := true
			for _, frag := range want {
				all = all && strings.Contains(line, frag)
			}
			if all {
				found = true
				break
			}
		}
		if !found {
			out = append(out, want)
		}
	}
	return out
}

func intPtr(i int) *int { return &i }

func othersOf(n, self int) []int {
	var peers []int
	for i := 0; i < n; i++ {
		if i != self {
			peers = append(peers, i)
		}
	}
	return peers
}

var dgxH100CanonicalBusIDs = []string{
	"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
	"0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0",
}

// wantDGXH100 is every field of every card of newDGXH100, as Tangram must
// report it.
func wantDGXH100() []gpu.GPU {
	var want []gpu.GPU
	for i := 0; i < 8; i++ {
		want = append(want, gpu.GPU{
			Index:                 i,
			Minor:                 i,
			UUID:                  mockUUID("h100", i),
			ProductName:           "NVIDIA H100 80GB HBM3",
			Brand:                 "Nvidia",
			Architecture:          "hopper",
			CUDAComputeCapability: "9.0",
			DriverVersion:         "580.95.05",
			CUDADriverVersion:     "13.0",
			MemoryBytes:           81559 << 20,
			PCIBusID:              dgxH100CanonicalBusIDs[i],
			NUMANode:              intPtr(i / 4),
			NVLinkPeers:           othersOf(8, i),
		})
	}
	return want
}

var pcieA100CanonicalBusIDs = []string{
	"0000:17:00.0", "0000:31:00.0", "0000:4b:00.0", "0000:65:00.0",
	"0000:98:00.0", "0000:b1:00.0", "0000:ca:00.0", "0000:e3:00.0",
}

func wantPCIeA100Pairs() []gpu.GPU {
	var want []gpu.GPU
	for i := 0; i < 8; i++ {
		want = append(want, gpu.GPU{
			Index:                 i,
			Minor:                 i,
			UUID:                  mockUUID("a100", i),
			ProductName:           "NVIDIA A100-PCIE-40GB",
			Brand:                 "Nvidia",
			Architecture:          "ampere",
			CUDAComputeCapability: "8.0",
			DriverVersion:         "550.54.15",
			CUDADriverVersion:     "12.4",
			MemoryBytes:           40960 << 20,
			PCIBusID:              pcieA100CanonicalBusIDs[i],
			NUMANode:              intPtr(i / 4),
			NVLinkPeers:           []int{i ^ 1},
		})
	}
	return want
}

func TestGPUs(t *testing.T) {
	const clusterUUID = "6f1c2d3e-4b5a-4c6d-8e7f-901234567890"
	tests := []struct {
		name     string
		system   func() *mockSystem
		want     func() []gpu.GPU
		wantLogs [][]string
	}{
		{
			name:   "DGX H100: all-to-all through NVSwitch, no fabric clique",
			system: newDGXH100,
			want:   wantDGXH100,
		},
		{
			name:   "PCIe A100 pairs: bridge links end on the partner card",
			system: newPCIeA100Pairs,
			want:   wantPCIeA100Pairs,
		},
		{
			name: "fabric clique reported once the card joined the fabric",
			system: func() *mockSystem {
				s := newDGXH100()
				for i, c := range s.cards {
					c.fabric = nvml.GpuFabricInfo{
						ClusterUuid: [16]uint8{0x6f, 0x1c, 0x2d, 0x3e, 0x4b, 0x5a, 0x4c, 0x6d, 0x8e, 0x7f, 0x90, 0x12, 0x34, 0x56, 0x78, 0x90},
						CliqueId:    7,
						State:       nvml.GPU_FABRIC_STATE_COMPLETED,
						Status:      uint32(nvml.SUCCESS),
					}
					switch i {
					case 1:
						c.fabric.State = nvml.GPU_FABRIC_STATE_IN_PROGRESS
					case 2:
						c.fabric.Status = uint32(nvml.ERROR_UNKNOWN)
					case 3:
						c.fabric.ClusterUuid = [16]uint8{}
					}
				}
				return s
			},
			want: func() []gpu.GPU {
				want := wantDGXH100()
				for i := range want {
					if i > 3 || i == 0 {
						want[i].FabricCliqueID = clusterUUID + "/7"
					}
				}
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Leaving out the fabric clique: the card has not finished joining the NVLink fabric"`, `"index"=1`, `"fabricState"=2`},
				{`"msg"="Leaving out the fabric clique: joining the NVLink fabric failed"`, `"index"=2`, `"error"="ERROR_UNKNOWN"`},
			},
		},
		{
			name: "fabric call unsupported (pre-Hopper driver)",
			system: func() *mockSystem {
				s := newDGXH100()
				s.unsupportedFabric = true
				return s
			},
			want:     wantDGXH100,
			wantLogs: [][]string{{`"msg"="Leaving out a value the GPU does not support"`, `"field"="fabricCliqueID"`, `"index"=0`}},
		},
		{
			name: "NUMA unsupported on one card, absurd on another",
			system: func() *mockSystem {
				s := newDGXH100()
				s.cards[2].numaRet = nvml.ERROR_NOT_SUPPORTED
				s.cards[5].numa = 4294967295 // (unsigned) -1
				return s
			},
			want: func() []gpu.GPU {
				want := wantDGXH100()
				want[2].NUMANode = nil
				want[5].NUMANode = nil
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Leaving out a value the GPU does not support"`, `"field"="numaNode"`, `"index"=2`, `"uuid"="` + mockUUID("h100", 2) + `"`},
				{`"msg"="Leaving out a value the GPU reports oddly"`, `"field"="numaNode"`, `"value"=4294967295`, `"index"=5`},
			},
		},
		{
			name: "unparsable CUDA and driver versions are left out on every card",
			system: func() *mockSystem {
				s := newPCIeA100Pairs()
				s.cudaVersion = 12345
				s.driverVersion = "r550_00"
				return s
			},
			want: func() []gpu.GPU {
				want := wantPCIeA100Pairs()
				for i := range want {
					want[i].CUDADriverVersion = ""
					want[i].DriverVersion = ""
				}
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Leaving out the CUDA driver version: NVML reports an unparsable one"`, `"cudaDriverVersion"=12345`},
				{`"msg"="Leaving out the driver version: NVML reports an unparsable one"`, `"driverVersion"="r550_00"`},
			},
		},
		{
			name: "version calls failing",
			system: func() *mockSystem {
				s := newPCIeA100Pairs()
				s.cudaVersionRet = nvml.ERROR_FUNCTION_NOT_FOUND
				s.driverVersionRet = nvml.ERROR_UNKNOWN
				return s
			},
			want: func() []gpu.GPU {
				want := wantPCIeA100Pairs()
				for i := range want {
					want[i].CUDADriverVersion = ""
					want[i].DriverVersion = ""
				}
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Leaving out the CUDA driver version: NVML cannot report it"`, `"error"="ERROR_FUNCTION_NOT_FOUND"`},
				{`"msg"="Leaving out the driver version: NVML cannot report it"`, `"error"="ERROR_UNKNOWN"`},
			},
		},
		{
			name: "GetUUID failing on one card: the others are still listed, its partner loses the bridge",
			system: func() *mockSystem {
				s := newPCIeA100Pairs()
				s.cards[3].uuidRet = nvml.ERROR_GPU_IS_LOST
				return s
			},
			want: func() []gpu.GPU {
				want := wantPCIeA100Pairs()
				want[2].NVLinkPeers = nil
				return append(want[:3], want[4:]...)
			},
			wantLogs: [][]string{{`"msg"="Skipping GPU: cannot read its UUID"`, `"index"=3`, `"pciBusID"="0000:65:00.0"`, `"error"="ERROR_GPU_IS_LOST"`}},
		},
		{
			name: "a card without a handle is skipped",
			system: func() *mockSystem {
				s := newPCIeA100Pairs()
				s.handleRet = map[int]nvml.Return{0: nvml.ERROR_UNKNOWN}
				return s
			},
			want: func() []gpu.GPU {
				want := wantPCIeA100Pairs()
				want[1].NVLinkPeers = nil // its partner is unknown, so not a switch either
				return want[1:]
			},
			wantLogs: [][]string{{`"msg"="Skipping GPU: cannot get its NVML handle"`, `"index"=0`}},
		},
		{
			name: "NVLink calls unsupported: no peers",
			system: func() *mockSystem {
				s := newDGXH100()
				for _, c := range s.cards {
					c.linksRet = nvml.ERROR_NOT_SUPPORTED
				}
				return s
			},
			want: func() []gpu.GPU {
				want := wantDGXH100()
				for i := range want {
					want[i].NVLinkPeers = nil
				}
				return want
			},
			wantLogs: [][]string{{`"msg"="GPU has no NVLink"`, `"index"=7`}},
		},
		{
			name: "broken and inactive links on some cards",
			system: func() *mockSystem {
				s := newDGXH100()
				// Card 0: every link state unreadable, so it reaches nobody.
				s.cards[0].linksRet = nvml.ERROR_UNKNOWN
				// Card 1: all links down but one, whose far end is unreadable.
				for l := range s.cards[1].links {
					s.cards[1].links[l].active = false
				}
				s.cards[1].links[4] = mockLink{active: true, remoteRet: nvml.ERROR_UNKNOWN}
				// Card 2: one link state unreadable, the rest fine.
				s.cards[2].links[0].stateRet = nvml.ERROR_UNKNOWN
				// Card 3: garbage far end on one link, the rest fine.
				s.cards[3].links[17].remote = "not-a-bus-id"
				return s
			},
			want: func() []gpu.GPU {
				want := wantDGXH100()
				want[0].NVLinkPeers = nil
				want[1].NVLinkPeers = nil
				for i := 2; i < 8; i++ {
					want[i].NVLinkPeers = nil
					for j := 2; j < 8; j++ {
						if j != i {
							want[i].NVLinkPeers = append(want[i].NVLinkPeers, j)
						}
					}
				}
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Ignoring an NVLink whose state cannot be read"`, `"index"=0`, `"link"=17`},
				{`"msg"="Ignoring an active NVLink whose far end cannot be read"`, `"index"=1`, `"link"=4`},
				{`"msg"="Ignoring an NVLink whose state cannot be read"`, `"index"=2`, `"link"=0`},
				{`"msg"="Ignoring an active NVLink with an unparsable far end"`, `"index"=3`, `"link"=17`, `"remotePCIBusID"="not-a-bus-id"`},
			},
		},
		{
			name: "every optional call failing on one card: it keeps index and UUID",
			system: func() *mockSystem {
				s := newPCIeA100Pairs()
				s.cards[4].otherRet = nvml.ERROR_UNKNOWN
				return s
			},
			want: func() []gpu.GPU {
				want := wantPCIeA100Pairs()
				want[4] = gpu.GPU{
					Index: 4, UUID: mockUUID("a100", 4),
					DriverVersion: "550.54.15", CUDADriverVersion: "12.4",
					// Its NVLink calls still work and name card 5 as the
					// far end, so the bridge survives (on both cards,
					// links being two-way) although card 4's own bus ID
					// is unknown.
					NVLinkPeers: []int{5},
				}
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Leaving out a value the GPU cannot report"`, `"field"="minor"`, `"index"=4`, `"error"="ERROR_UNKNOWN"`},
				{`"field"="productName"`, `"index"=4`},
				{`"field"="brand"`, `"index"=4`},
				{`"field"="architecture"`, `"index"=4`},
				{`"field"="cudaComputeCapability"`, `"index"=4`},
				{`"field"="memory"`, `"index"=4`},
				{`"field"="pciBusID"`, `"index"=4`},
				{`"field"="numaNode"`, `"index"=4`},
				{`"field"="fabricCliqueID"`, `"index"=4`},
			},
		},
		{
			name: "values NVML reports oddly",
			system: func() *mockSystem {
				s := newPCIeA100Pairs()
				c := s.cards[6]
				c.arch = nvml.DEVICE_ARCH_UNKNOWN
				c.brand = nvml.BRAND_UNKNOWN
				c.memory = 0
				c.ccMajor, c.ccMinor = 0, 0
				c.busID = "garbage"
				c.minor = -1
				return s
			},
			want: func() []gpu.GPU {
				want := wantPCIeA100Pairs()
				want[6] = gpu.GPU{
					Index: 6, UUID: mockUUID("a100", 6), NUMANode: intPtr(1),
					ProductName:   "NVIDIA A100-PCIE-40GB",
					DriverVersion: "550.54.15", CUDADriverVersion: "12.4",
					// Card 6 still names card 7 at the far end of its
					// bridge. (Card 7's links end on card 6's bus ID,
					// unknown now, so they look like an NVSwitch link;
					// with no other card on a switch that adds nothing.)
					NVLinkPeers: []int{7},
				}
				return want
			},
			wantLogs: [][]string{
				{`"msg"="Leaving out a value the GPU reports oddly"`, `"field"="architecture"`, `"value"=4294967295`},
				{`"field"="brand"`, `"value"=0`, `"index"=6`},
				{`"field"="memory"`, `"value"=0`},
				{`"field"="cudaComputeCapability"`, `"value"="0.0"`},
				{`"field"="pciBusID"`, `"value"="garbage"`},
				{`"field"="minor"`, `"value"=-1`},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, logs := logContext()
			got, err := New(tt.system().server()).GPUs(ctx)
			if err != nil {
				t.Fatalf("GPUs: %v", err)
			}
			if diff := cmp.Diff(tt.want(), got); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
			if m := logs.missing(tt.wantLogs); len(m) > 0 {
				t.Errorf("log lines missing: %q\nlogged:\n%s", m, strings.Join(logs.lines, "\n"))
			}
		})
	}
}

func TestGPUsCountFails(t *testing.T) {
	s := newDGXH100()
	s.countRet = nvml.ERROR_UNINITIALIZED
	gpus, err := New(s.server()).GPUs(context.Background())
	const want = "listing GPUs: nvmlDeviceGetCount: ERROR_UNINITIALIZED"
	if err == nil || err.Error() != want || gpus != nil {
		t.Errorf("GPUs() = %v, %v; want nil, %q", gpus, err, want)
	}
}

func TestOpen(t *testing.T) {
	for _, tt := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "loading NVML from /dr/usr/lib64/libnvidia-ml.so.1: ERROR_LIBRARY_NOT_FOUND (is it the driver's libnvidia-ml.so.1, for this machine's architecture?)"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "initialising NVML from /dr/usr/lib64/libnvidia-ml.so.1 (is the NVIDIA kernel driver loaded?): ERROR_DRIVER_NOT_LOADED"},
	} {
		t.Run("init fails "+tt.ret.String(), func(t *testing.T) {
			s := newDGXH100()
			s.initRet = tt.ret
			src, cleanup, err := open(context.Background(), s.server(), "/dr/usr/lib64/libnvidia-ml.so.1")
			if src != nil || err == nil || err.Error() != tt.want {
				t.Fatalf("open() = %v, %v; want nil, %q", src, err, tt.want)
			}
			cleanup() // safe to call
		})
	}
	t.Run("no library path", func(t *testing.T) {
		if _, cleanup, err := Open(context.Background(), ""); err == nil {
			t.Error("Open with no library path succeeded")
		} else {
			cleanup()
		}
	})
	t.Run("init succeeds, cleanup shuts down", func(t *testing.T) {
		s := newDGXH100()
		calls := 0
		s.shutdownCalls = &calls
		src, cleanup, err := open(context.Background(), s.server(), "lib")
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		got, err := src.GPUs(context.Background())
		if err != nil || len(got) != 8 {
			t.Fatalf("GPUs() = %d cards, %v; want 8", len(got), err)
		}
		if calls != 0 {
			t.Fatalf("NVML shut down before cleanup")
		}
		cleanup()
		if calls != 1 {
			t.Errorf("cleanup called Shutdown %d times, want 1", calls)
		}
	})
}

func BenchmarkGPUsDGXH100(b *testing.B) {
	src := New(newDGXH100().server())
	ctx := context.Background()
	for b.Loop() {
		if _, err := src.GPUs(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

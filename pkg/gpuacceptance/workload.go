package gpuacceptance

import (
	"fmt"

	"github.com/tangram-gpu/tangram/pkg/gpucheck"
)

// AllocResult is what cuda-alloc (hack/gpu-acceptance/cuda-alloc) reports;
// gpu-check reads the same line (pkg/gpucheck).
type AllocResult = gpucheck.AllocResult

// ParseAllocLog finds cuda-alloc's result line in a pod's log.
func ParseAllocLog(log string) (AllocResult, error) { return gpucheck.ParseAllocLog(log) }

// Shape is a claim shape the acceptance run puts a pod on.
type Shape string

const (
	WholeCard  Shape = "whole-card"
	Share      Shape = "memory-share"
	NVLinkPair Shape = "nvlink-pair"
)

// Expectation is what a pod of a shape must see.
type Expectation struct {
	Shape Shape
	// TryMiB is what cuda-alloc was asked to allocate.
	TryMiB int64
	// ShareMiB is the memory the share's claim requested (Share only).
	ShareMiB int64
}

// Judge says whether a pod's result meets its shape's expectation:
// a whole card sees one device and gets all it asks for (cuda-alloc asks
// for 90 % of the card); a share is refused before it holds more than its
// share (cuda-alloc asks for more); an NVLink pair sees two devices.
func Judge(e Expectation, r AllocResult) Check {
	c := Check{
		Card:   string(e.Shape),
		Field:  "pod",
		Plugin: fmt.Sprintf("devices=%d allocated=%dMiB of %dMiB refused=%v", r.Devices, r.AllocatedMiB, e.TryMiB, r.Refused),
	}
	switch e.Shape {
	case WholeCard:
		c.SMI = fmt.Sprintf("want 1 device and all %d MiB", e.TryMiB)
		c.OK = r.Devices == 1 && !r.Refused && r.AllocatedMiB == e.TryMiB
	case Share:
		c.SMI = fmt.Sprintf("want a refusal at or below the %d MiB share", e.ShareMiB)
		c.OK = r.Devices == 1 && r.Refused && r.AllocatedMiB <= e.ShareMiB
	case NVLinkPair:
		c.SMI = fmt.Sprintf("want 2 devices and all %d MiB", e.TryMiB)
		c.OK = r.Devices == 2 && !r.Refused && r.AllocatedMiB == e.TryMiB
	default:
		c.SMI = "unknown shape"
	}
	return c
}

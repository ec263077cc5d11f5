package gpuacceptance

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// AllocResult is what hack/gpu-acceptance/cuda-alloc/cuda-alloc.c reports from inside a
// pod: how many devices CUDA sees and how much of TRY_MIB it could allocate.
type AllocResult struct {
	Devices      int
	TotalMiB     int64
	FreeMiB      int64
	AllocatedMiB int64
	Refused      bool
	Error        int // CUresult of the refused allocation
}

const allocPrefix = "cuda-alloc: devices="

// ParseAllocLog finds cuda-alloc's result line in a pod's log.
func ParseAllocLog(log string) (AllocResult, error) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, allocPrefix) {
			continue
		}
		var r AllocResult
		fields := map[string]string{}
		for _, kv := range strings.Fields(strings.TrimPrefix(line, "cuda-alloc: ")) {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		var err error
		num := func(key string) int64 {
			if err != nil {
				return 0
			}
			var n int64
			n, err = strconv.ParseInt(fields[key], 10, 64)
			if err != nil {
				err = fmt.Errorf("cuda-alloc line %q: %s: %w", line, key, err)
			}
			return n
		}
		r.Devices = int(num("devices"))
		r.TotalMiB, r.FreeMiB, r.AllocatedMiB = num("total_mib"), num("free_mib"), num("allocated_mib")
		r.Refused = num("refused") == 1
		r.Error = int(num("error"))
		return r, err
	}
	return AllocResult{}, fmt.Errorf("no %q line in the pod's log (did the CUDA driver load? the log says: %q)", allocPrefix, strings.TrimSpace(log))
}

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

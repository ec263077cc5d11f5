package gpucheck

import (
	"fmt"
	"strings"
)

// NVML's return names as the probe spells them (nvml.h).
const (
	NVMLSuccess      = "SUCCESS"
	NVMLNotSupported = "ERROR_NOT_SUPPORTED"
)

// CardMemory is one card's memory as NVML's two calls give it and as the
// plugin publishes it (pkg/gpu/nvmlgpu, then pkg/resourceslices): the
// reserved-memory row's reading. Byte counts are NVML's, unrounded.
type CardMemory struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// V2Return is nvmlDeviceGetMemoryInfo_v2's answer ("SUCCESS", or the
	// error's name; "symbol missing" when the library lacks the call).
	V2Return string `json:"v2Return"`
	// Total, Reserved, Free and Used are v2's: reserved is held by the
	// driver and no process can allocate it.
	Total    uint64 `json:"totalBytes"`
	Reserved uint64 `json:"reservedBytes"`
	Free     uint64 `json:"freeBytes"`
	Used     uint64 `json:"usedBytes"`
	// V1Return, V1Total, V1Free and V1Used are nvmlDeviceGetMemoryInfo's
	// (v1 counts the reserved memory as used), for comparison.
	V1Return string `json:"v1Return"`
	V1Total  uint64 `json:"v1TotalBytes"`
	V1Free   uint64 `json:"v1FreeBytes"`
	V1Used   uint64 `json:"v1UsedBytes"`
	// Published is the card device's memory capacity in the plugin's
	// ResourceSlice, 0 when it publishes none (a card in MIG mode offers
	// its partitions instead); PublishedMax is the most one claim may ask
	// (the request policy's maximum, the capacity when there is none).
	Published    int64 `json:"publishedBytes"`
	PublishedMax int64 `json:"publishedMaxBytes"`
}

// mib writes a byte count in MiB (rounded down) and, when that is not
// exact, the bytes too.
func mib(b uint64) string {
	if b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d MiB (%d bytes)", b>>20, b)
}

// MemoryOutcome judges each card's published memory against what a tenant
// can allocate, total − reserved (nvmlDeviceGetMemoryInfo_v2). It passes
// when the plugin publishes at most that, notes (does not fail) a card
// where it publishes more, or where the figures cannot be compared, and
// fails only when NVML answers an error other than NOT_SUPPORTED or no
// card was read.
func MemoryOutcome(cards []CardMemory) Outcome {
	if len(cards) == 0 {
		return Fail("NVML listed no card to read the memory of")
	}
	var lines, notes, errs []string
	for _, c := range cards {
		label := fmt.Sprintf("gpu %d", c.Index)
		v1 := "v1 " + c.V1Return
		if c.V1Return == NVMLSuccess {
			v1 = fmt.Sprintf("v1 total %s, free %s, used %s", mib(c.V1Total), mib(c.V1Free), mib(c.V1Used))
		} else if c.V1Return != NVMLNotSupported {
			errs = append(errs, fmt.Sprintf("%s: nvmlDeviceGetMemoryInfo: %s", label, c.V1Return))
		}
		published := "publishes no memory capacity for the card (MIG mode, or memory unreadable)"
		if c.Published > 0 {
			published = fmt.Sprintf("the plugin publishes %s (one claim at most %s)", mib(uint64(c.Published)), mib(uint64(c.PublishedMax)))
		}
		if c.V2Return != NVMLSuccess {
			lines = append(lines, fmt.Sprintf("%s: v2 %s; %s; %s", label, c.V2Return, v1, published))
			if c.V2Return == NVMLNotSupported || strings.HasPrefix(c.V2Return, "symbol") {
				notes = append(notes, fmt.Sprintf("%s: no reserved figure (nvmlDeviceGetMemoryInfo_v2 %s): not compared", label, c.V2Return))
			} else {
				errs = append(errs, fmt.Sprintf("%s: nvmlDeviceGetMemoryInfo_v2: %s", label, c.V2Return))
			}
			continue
		}
		line := fmt.Sprintf("%s: v2 total %s, reserved %s, free %s, used %s; %s; %s", label,
			mib(c.Total), mib(c.Reserved), mib(c.Free), mib(c.Used), v1, published)
		if c.V1Return == NVMLSuccess && c.V1Used >= c.Used {
			line += fmt.Sprintf("; v1 used − v2 used = %s", mib(c.V1Used-c.Used))
		}
		lines = append(lines, line)
		if c.Reserved > c.Total {
			errs = append(errs, fmt.Sprintf("%s: reserved %s is more than the total %s", label, mib(c.Reserved), mib(c.Total)))
			continue
		}
		allocatable := c.Total - c.Reserved
		switch {
		case c.Published <= 0:
			notes = append(notes, fmt.Sprintf("%s: %s: nothing to compare with total − reserved %s", label, published, mib(allocatable)))
		case uint64(c.Published) > allocatable:
			notes = append(notes, fmt.Sprintf("%s: the plugin publishes more than a tenant can allocate: %s published, total %s − reserved %s = %s allocatable, %s too much",
				label, mib(uint64(c.Published)), mib(c.Total), mib(c.Reserved), mib(allocatable), mib(uint64(c.Published)-allocatable)))
		default:
			lines[len(lines)-1] += fmt.Sprintf(", at most total − reserved %s", mib(allocatable))
		}
	}
	detail := strings.Join(lines, "; ")
	if len(errs) > 0 {
		return Fail("%s; %s", strings.Join(errs, "; "), detail)
	}
	if len(notes) > 0 {
		return Note("note: %s; %s", strings.Join(notes, "; "), detail)
	}
	return Pass("every card publishes at most its total − reserved memory: %s", detail)
}

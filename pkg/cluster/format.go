package cluster

import (
	"fmt"
	"strings"
)

const (
	kib = int64(1) << 10
	mib = kib << 10
	gib = mib << 10
)

// FormatBytes writes a memory size the way people read GPU memory: GiB
// with at most one decimal, MiB below 1 GiB. The view, the diagnosis and
// gang status all say sizes this way.
func FormatBytes(n int64) string {
	switch {
	case n >= gib || n == 0:
		return trimDecimal(float64(n)/float64(gib)) + " GiB"
	case n >= mib:
		return trimDecimal(float64(n)/float64(mib)) + " MiB"
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func trimDecimal(f float64) string {
	s := fmt.Sprintf("%.1f", f)
	return strings.TrimSuffix(s, ".0")
}

package cdi

import (
	"errors"
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

var maxInt64Quantity = resource.NewQuantity(math.MaxInt64, resource.DecimalSI)

// Int64Value returns q as an int64 and refuses a quantity it cannot read
// exactly (rounded up, like Quantity.Value) instead of letting Value wrap
// it: (2^64+1) Gi written in bytes wraps to exactly 1 Gi. A claim's consumed
// capacity is a user's number; the scheduler compares such values exactly,
// so the plugin must never read one as something else.
func Int64Value(q resource.Quantity) (int64, error) {
	if v, ok := q.AsInt64(); ok {
		// Exact: an integer held as an int64 (the common case).
		return v, nil
	}
	switch {
	case q.Cmp(*maxInt64Quantity) > 0:
		return 0, fmt.Errorf("beyond the largest number this plugin handles (%d); the allocation is wrong, delete and recreate the claim",
			int64(math.MaxInt64))
	case q.Sign() < 0:
		// No consumption is negative, and Value misreads large negative
		// quantities; small ones were read exactly above.
		return 0, errors.New("negative; the allocation is wrong, delete and recreate the claim")
	}
	return q.Value(), nil
}

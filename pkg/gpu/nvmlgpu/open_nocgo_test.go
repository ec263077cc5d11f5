//go:build !cgo

package nvmlgpu

import (
	"context"
	"errors"
	"testing"
)

func TestOpenWithoutCgo(t *testing.T) {
	src, cleanup, err := Open(context.Background(), "/usr/lib64/libnvidia-ml.so.1")
	if src != nil || !errors.Is(err, ErrNVMLUnavailable) {
		t.Fatalf("Open() = %v, %v; want nil, ErrNVMLUnavailable", src, err)
	}
	const want = "this binary was built without cgo; NVML is unavailable: use --fake-profile or a cgo build"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	cleanup() // must be safe to call
}

func TestWithoutCgoEveryNVMLCallSaysSo(t *testing.T) {
	if _, err := Partitions(nil); !errors.Is(err, ErrNVMLUnavailable) {
		t.Errorf("Partitions() error = %v, want ErrNVMLUnavailable", err)
	}
	if q, err := QueryMIG(nil); q != nil || !errors.Is(err, ErrNVMLUnavailable) {
		t.Errorf("QueryMIG() = %v, %v; want nil, ErrNVMLUnavailable", q, err)
	}
}

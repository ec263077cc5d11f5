//go:build !cgo

package nvidia

import (
	"context"
	"errors"
	"testing"
)

func TestNewWithoutCgo(t *testing.T) {
	h, err := New(context.Background(), Options{DriverRoot: "/"})
	if !errors.Is(err, ErrUnavailable) || h != nil {
		t.Errorf("New = %v, %v; want nil, ErrUnavailable", h, err)
	}
}

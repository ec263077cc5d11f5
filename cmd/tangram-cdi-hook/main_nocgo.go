//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// NVML needs cgo; a static build of the hook must not pretend to work.
func main() {
	fmt.Fprintln(os.Stderr, "tangram-cdi-hook: built without cgo, so NVML is unavailable and no GPU memory limit can be set; build it with CGO_ENABLED=1")
	os.Exit(1)
}

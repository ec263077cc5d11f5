// Command nvidia-cuda-mps-control is the stand-in MPS control program of the
// mock driver root (hack/mock-driver-root): pkg/plugin/mps's stand-in daemon
// and its client, with the real program's options, as strict as NVIDIA
// documents the real one (MPS v3 commands as arguments only, no -M with
// -p 3, namespace names of [a-z0-9_], ...; docs/nvml.md lists the rules and
// the TANGRAM_STANDIN_MPS_* switches). It enforces no limit.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// driverVersion is the mock driver root's version, set at build time.
var driverVersion string

func main() {
	if driverVersion == "" {
		fmt.Fprintln(os.Stderr, "stand-in nvidia-cuda-mps-control: built without a driver version; build it with -ldflags \"-X main.driverVersion=<version>\" (hack/mock-driver-root/create.sh does)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := standin.Main(ctx, driverVersion, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

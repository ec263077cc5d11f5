// Package controlbin writes the MPS control binaries that tests run as
// separate processes: a shell fake, a failing one, and the stand-in of two
// driver releases (this test binary, re-run as standin.Main).
package controlbin

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// fakeMPSControl (FakeBinary) mimics nvidia-cuda-mps-control: "-f"
// records its pid and stays in the foreground; as a client it answers
// get_server_list while the recorded daemon lives and kills it on quit. It
// writes a log of what it did.
const fakeMPSControl = `#!/bin/sh
dir="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-f" ]; then
	echo "start $CUDA_VISIBLE_DEVICES $2" >> "$dir/fake.log"
	ls /dev/shm > "$dir/shm.txt"
	echo "$$" > "$dir/fake.pid.tmp" && mv "$dir/fake.pid.tmp" "$dir/fake.pid"
	# Tests that wait for a start read the pids from this FIFO.
	if [ -p "$dir/started" ]; then echo "$$" > "$dir/started"; fi
	exec sleep 100000
fi
read cmd
pid=$(cat "$dir/fake.pid" 2>/dev/null)
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
	echo "Cannot find MPS control daemon process" >&2
	exit 1
fi
case "$cmd" in
get_server_list) exit 0 ;;
quit) echo "quit" >> "$dir/fake.log"; rm -f "$dir/fake.pid"; kill "$pid"; exit 0 ;;
*) echo "unknown command $cmd" >&2; exit 1 ;;
esac
`

// Scripts are written once before any test forks, to avoid ETXTBSY from a
// write-open file descriptor inherited by a concurrently forked child.
var (
	// FakeBinary is fakeMPSControl.
	FakeBinary string
	// FailingBinary fails every start, as with no GPU.
	FailingBinary string
	// StandInBinary runs the stand-in of a driver with MPS v3.
	StandInBinary string
	// StandIn580Binary runs the stand-in of r580, which has no MPS v3.
	StandIn580Binary string
)

// standInEnv makes this test binary run as the stand-in
// nvidia-cuda-mps-control (standin.Main) of the driver version it holds, so
// that the client code is tested against it as a separate process without
// building another program.
const standInEnv = "TANGRAM_TEST_RUN_STANDIN_MPS_CONTROL"

// The drivers the stand-in binaries belong to: one with MPS v3, and r580,
// which has none.
const (
	StandInDriver    = "615.23.01"
	StandIn580Driver = "580.159.04"
)

// Main runs a package's tests (call it from TestMain) with the control
// binaries below written first; when the test binary is started as the
// stand-in (by one of those scripts), it runs standin.Main instead.
func Main(m *testing.M) {
	if version := os.Getenv(standInEnv); version != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := standin.Main(ctx, version, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "fake-mps")
	if err != nil {
		panic(err)
	}
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	StandInBinary = filepath.Join(dir, "standin-mps-control")
	StandIn580Binary = filepath.Join(dir, "standin-580-mps-control")
	for binary, version := range map[string]string{StandInBinary: StandInDriver, StandIn580Binary: StandIn580Driver} {
		if err := os.WriteFile(binary, []byte("#!/bin/sh\n"+standInEnv+"="+version+" exec '"+self+"' \"$@\"\n"), 0o755); err != nil {
			panic(err)
		}
	}
	FakeBinary = filepath.Join(dir, "nvidia-cuda-mps-control")
	FailingBinary = filepath.Join(dir, "broken-mps-control")
	if err := os.WriteFile(FakeBinary, []byte(fakeMPSControl), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(FailingBinary, []byte("#!/bin/sh\necho 'no GPU' >&2\nexit 3\n"), 0o755); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// FakeLog is what FakeBinary did with the pipe directory pipeDir: the
// words of its log, a line's end written " ; ".
func FakeLog(t *testing.T, pipeDir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(pipeDir, "fake.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(data), "\n", " ; "))
}

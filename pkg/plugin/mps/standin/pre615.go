package standin

// The control binary of a driver before r615 (r535 to r580, what most
// clusters run): no MPS v3. NVIDIA-FACTS.md ("Round two", "The binary
// before r615"): its options are -d -f -h -v -S -M only; there is no -p,
// -m, -q or -a, no command given as arguments, and CUDA_MPS_PROTOCOL_VERSION
// means nothing to it; commands go through the control shell (stdin).

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// firstV3Driver is the first driver release with MPS v3.
const firstV3Driver = 615

// driverMajor reads a driver version's release ("580.159.04" is 580); 0
// for "".
func driverMajor(version string) (int, error) {
	if version == "" {
		return 0, nil
	}
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("stand-in nvidia-cuda-mps-control: driver version %q is not <release>.<minor>...", version)
	}
	return n, nil
}

// runPre615 is the binary before r615: -d, -f, -M and -h/-v, else the
// control shell. Rule: pre615-options.
func runPre615(ctx context.Context, inv Invocation) int {
	var daemon, foreground, multiUser bool
	for _, a := range inv.Args {
		switch a {
		case "-d", "--daemon":
			daemon = true
		case "-f", "--foreground":
			foreground = true
		case "-M":
			multiUser = true
		case "-h", "--help":
			fmt.Fprintln(inv.Stdout, "stand-in nvidia-cuda-mps-control (Tangram), driver "+inv.DriverVersion+": [-d|-f] [-M] | -v | -h; commands on stdin")
			return 0
		case "-v", "--version":
			fmt.Fprintln(inv.Stdout, inv.DriverVersion)
			return 0
		case "-S":
			fmt.Fprintf(inv.Stderr, "%s: not played by the stand-in\n", a)
			return 2
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(inv.Stderr, "Unknown option %s (driver %s: MPS v3 options such as -p, -m, -q and -a need driver %d or later)\n", a, inv.DriverVersion, firstV3Driver)
			} else {
				fmt.Fprintf(inv.Stderr, "Unexpected argument %s (driver %s takes commands on standard input; commands as arguments are MPS v3, driver %d or later)\n", a, inv.DriverVersion, firstV3Driver)
			}
			return 2
		}
	}
	pipeDir := envOr(inv.Getenv, "CUDA_MPS_PIPE_DIRECTORY", defaultMPSPipeDir)
	switch {
	case daemon && foreground:
		fmt.Fprintln(inv.Stderr, "-d and -f are exclusive")
		return 2
	case foreground:
		// CUDA_MPS_PROTOCOL_VERSION is not read: the daemon is classic.
		return runForeground(ctx, inv, Config{PipeDir: pipeDir, LogDir: envOr(inv.Getenv, "CUDA_MPS_LOG_DIRECTORY", defaultMPSLogDir),
			Protocol: 2, MultiUser: multiUser, UnderscoreColumns: inv.Getenv(EnvCSVSpelling) == "underscore", Hang: ParseHang(inv.Getenv(EnvHang))})
	case daemon:
		return startBackground(ctx, inv, pipeDir)
	}
	return sendLines(ctx, pipeDir, inv)
}

package mps

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults of the real nvidia-cuda-mps-control.
const (
	defaultMPSPipeDir = "/tmp/nvidia-mps"
	defaultMPSLogDir  = "/var/log/nvidia-mps"
)

// StandInMain is the command line of the stand-in nvidia-cuda-mps-control
// that hack/mock-driver-root installs. Like the real one it reads
// CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY and
// CUDA_MPS_PROTOCOL_VERSION and takes
//
//	-d, --daemon      start the daemon in the background
//	-f, --foreground  run the daemon in the foreground
//	-p, --protocol N  2 (legacy, default) or 3 (MPS v3); the variable wins
//	-M, -m, --multiuser
//	-q, --quit        ask the running daemon to quit
//
// Without -d or -f it is a client: every line of stdin is a command sent to
// the running daemon, its reply printed. It returns the exit status.
func StandInMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var daemon, foreground, multiUser, quit bool
	protocol := 2
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-d", "--daemon":
			daemon = true
		case "-f", "--foreground":
			foreground = true
		case "-M", "-m", "--multiuser":
			multiUser = true
		case "-q", "--quit":
			quit = true
		case "-p", "--protocol":
			if i+1 == len(args) {
				fmt.Fprintf(stderr, "%s needs 2 or 3\n", a)
				return 2
			}
			i++
			p, err := strconv.Atoi(args[i])
			if err != nil || (p != 2 && p != 3) {
				fmt.Fprintf(stderr, "%s %s: want 2 or 3\n", a, args[i])
				return 2
			}
			protocol = p
		case "-h", "--help":
			fmt.Fprintln(stdout, "stand-in nvidia-cuda-mps-control (Tangram mock driver root): [-d|-f] [-p 2|3] [-M] [-q]; commands on stdin")
			return 0
		default:
			fmt.Fprintf(stderr, "unknown option %s\n", a)
			return 2
		}
	}
	if v := os.Getenv("CUDA_MPS_PROTOCOL_VERSION"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || (p != 2 && p != 3) {
			fmt.Fprintf(stderr, "CUDA_MPS_PROTOCOL_VERSION=%s: want 2 or 3\n", v)
			return 2
		}
		protocol = p
	}
	pipeDir := envOr("CUDA_MPS_PIPE_DIRECTORY", defaultMPSPipeDir)
	logDir := envOr("CUDA_MPS_LOG_DIRECTORY", defaultMPSLogDir)
	switch {
	case daemon && foreground:
		fmt.Fprintln(stderr, "-d and -f are exclusive")
		return 2
	case foreground:
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "creating the log directory: %v\n", err)
			return 1
		}
		if err := RunStandInControlDaemon(ctx, StandInConfig{PipeDir: pipeDir, LogDir: logDir, Protocol: protocol, MultiUser: multiUser}); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	case daemon:
		return startBackground(ctx, args, pipeDir, stderr)
	case quit:
		return sendLines(ctx, pipeDir, strings.NewReader("quit\n"), stdout, stderr)
	}
	return sendLines(ctx, pipeDir, stdin, stdout, stderr)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// startBackground runs this program again with -f in a session of its own
// and returns once it answers on the control socket.
func startBackground(ctx context.Context, args []string, pipeDir string, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "starting the daemon: %v\n", err)
		return 1
	}
	var fgArgs []string
	for _, a := range args {
		if a != "-d" && a != "--daemon" {
			fgArgs = append(fgArgs, a)
		}
	}
	cmd := exec.Command(self, append(fgArgs, "-f")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "starting the daemon: %v\n", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := SendStandInCommand(ctx, pipeDir, ""); err == nil {
			return 0
		}
		select {
		case err := <-exited:
			fmt.Fprintf(stderr, "the daemon exited at start: %v\n", err)
			return 1
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "the daemon did not answer on %s within 10s\n", filepath.Join(pipeDir, "control"))
			return 1
		}
	}
}

// sendLines sends each command of in; any failed command makes the exit
// status 1.
func sendLines(ctx context.Context, pipeDir string, in io.Reader, stdout, stderr io.Writer) int {
	status := 0
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		reply, err := SendStandInCommand(ctx, pipeDir, line)
		if err != nil {
			fmt.Fprintln(stderr, err)
			status = 1
			continue
		}
		_, _ = io.WriteString(stdout, reply)
	}
	return status
}

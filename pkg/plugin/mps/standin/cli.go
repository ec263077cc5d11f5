package standin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// standInBackgroundEnv marks the -f process that -d started: its standard
// input is not the caller's, so its end is no reason to exit.
const standInBackgroundEnv = "TANGRAM_STANDIN_MPS_BACKGROUND"

// Main is the command line of the stand-in nvidia-cuda-mps-control, with
// the process's environment, as the binary of driverVersion (e.g.
// "580.159.04"; "" for a binary of no particular driver). See Run.
// hack/mock-driver-root builds it with its driver's version.
func Main(ctx context.Context, driverVersion string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Run(ctx, Invocation{DriverVersion: driverVersion, Args: args, Getenv: os.Getenv, Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// Invocation is one run of the stand-in program.
type Invocation struct {
	// DriverVersion is the driver release the binary belongs to, e.g.
	// "580.159.04". Before r615 the binary has no MPS v3 (rule:
	// pre615-options); "" plays a binary of no particular release, which
	// takes both forms (the plugin's in-process control on fake GPUs).
	DriverVersion string
	// Args are the arguments after the program name.
	Args []string
	// Getenv reads the environment (os.Getenv for the program).
	Getenv         func(string) string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Run runs the stand-in nvidia-cuda-mps-control and returns its exit
// status. Like the real one (NVIDIA, "MPS v3 Interface", control daemon
// options) it reads CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY and
// CUDA_MPS_PROTOCOL_VERSION (which wins over -p) and takes
//
//	-d, --daemon        start the daemon in the background
//	-f, --foreground    run the daemon in the foreground; it exits when its
//	                    standard input ends (switch: EnvStdinEOF)
//	-p, --protocol N    2 (legacy, default) or 3 (MPS v3)
//	-m, --multiuser     multi-user mode; -M is the legacy spelling, refused
//	                    with protocol 3
//	-q, --quit          ask the running daemon to quit
//	<module> <verb> ... an MPS v3 command, as arguments
//
// With none of these it is the legacy shell: every line of standard input
// is a command. A client follows the running daemon's protocol whatever
// its own -p says; the daemon refuses a command given the wrong way (stdin
// under v3, arguments under v2).
func Run(ctx context.Context, inv Invocation) int {
	major, err := driverMajor(inv.DriverVersion)
	if err != nil {
		fmt.Fprintln(inv.Stderr, err)
		return 2
	}
	if major > 0 && major < firstV3Driver {
		return runPre615(ctx, inv)
	}
	var daemon, foreground, multiUser, legacyMultiUser, quit bool
	protocol := 2
	args := inv.Args
	var command []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-d", "--daemon":
			daemon = true
		case "-f", "--foreground":
			foreground = true
		case "-m", "--multiuser":
			multiUser = true
		case "-M":
			legacyMultiUser = true
		case "-q", "--quit":
			quit = true
		case "-p", "--protocol":
			if i+1 == len(args) {
				fmt.Fprintf(inv.Stderr, "%s needs 2 or 3\n", a)
				return 2
			}
			i++
			p, err := strconv.Atoi(args[i])
			if err != nil || (p != 2 && p != 3) {
				fmt.Fprintf(inv.Stderr, "%s %s: want 2 or 3\n", a, args[i])
				return 2
			}
			protocol = p
		case "-a", "--apply":
			fmt.Fprintf(inv.Stderr, "%s: configuration files are not supported by the stand-in\n", a)
			return 2
		case "-h", "--help":
			fmt.Fprintln(inv.Stdout, "stand-in nvidia-cuda-mps-control (Tangram): [-d|-f] [-p 2|3] [-m] [-q] | [-p 3] <module> <verb> ...; legacy commands on stdin")
			return 0
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(inv.Stderr, "unknown option %s\n", a)
				return 2
			}
			command = args[i:]
			i = len(args)
		}
	}
	if v := inv.Getenv("CUDA_MPS_PROTOCOL_VERSION"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || (p != 2 && p != 3) {
			fmt.Fprintf(inv.Stderr, "CUDA_MPS_PROTOCOL_VERSION=%s: want 2 or 3\n", v)
			return 2
		}
		protocol = p
	}
	pipeDir := envOr(inv.Getenv, "CUDA_MPS_PIPE_DIRECTORY", defaultMPSPipeDir)
	logDir := envOr(inv.Getenv, "CUDA_MPS_LOG_DIRECTORY", defaultMPSLogDir)
	switch {
	case daemon && foreground:
		fmt.Fprintln(inv.Stderr, "-d and -f are exclusive")
		return 2
	case (daemon || foreground) && (quit || len(command) > 0):
		fmt.Fprintln(inv.Stderr, "-d/-f start a daemon and take no command")
		return 2
	case (daemon || foreground) && legacyMultiUser && protocol == 3:
		// rule: v3-no-M.
		fmt.Fprintln(inv.Stderr, "-M is the legacy multi-user option; MPS v3 (protocol 3) takes -m/--multiuser")
		return 2
	case foreground:
		return runForeground(ctx, inv, Config{PipeDir: pipeDir, LogDir: logDir, Protocol: protocol, MultiUser: multiUser || legacyMultiUser,
			UnderscoreColumns: inv.Getenv(EnvCSVSpelling) == "underscore", Hang: ParseHang(inv.Getenv(EnvHang))})
	case daemon:
		return startBackground(ctx, inv, pipeDir)
	case quit && len(command) > 0:
		fmt.Fprintln(inv.Stderr, "-q takes no command")
		return 2
	case quit:
		return sendOne(ctx, pipeDir, wireRequest{Transport: transportFlag, Args: []string{"quit"}}, inv)
	case strings.Join(command, " ") == standInClientCommand:
		return runStandInClient(ctx, inv, pipeDir)
	case len(command) > 0:
		return sendOne(ctx, pipeDir, wireRequest{Transport: transportArgv, Args: command}, inv)
	}
	return sendLines(ctx, pipeDir, inv)
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// runForeground is -f: the daemon, until ctx ends, a client sends quit, or
// (rule: fg-stdin-eof) its standard input ends.
func runForeground(ctx context.Context, inv Invocation, cfg Config) int {
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		fmt.Fprintf(inv.Stderr, "creating the log directory: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if inv.Getenv(standInBackgroundEnv) == "" && inv.Getenv(EnvStdinEOF) != "ignore" {
		stdin := inv.Stdin
		if stdin == nil {
			stdin = bytes.NewReader(nil)
		}
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			fmt.Fprintln(inv.Stderr, "standard input closed: the foreground daemon exits")
			cancel()
		}()
	}
	if err := RunDaemon(ctx, cfg); err != nil {
		fmt.Fprintln(inv.Stderr, err)
		return 1
	}
	return 0
}

// startBackground runs this program again with -f in a session of its own
// and returns once it answers on the control socket.
func startBackground(ctx context.Context, inv Invocation, pipeDir string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(inv.Stderr, "starting the daemon: %v\n", err)
		return 1
	}
	var fgArgs []string
	for _, a := range inv.Args {
		if a != "-d" && a != "--daemon" {
			fgArgs = append(fgArgs, a)
		}
	}
	cmd := exec.Command(self, append(fgArgs, "-f")...)
	cmd.Env = append(os.Environ(), standInBackgroundEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(inv.Stderr, "starting the daemon: %v\n", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := Probe(ctx, pipeDir); err == nil {
			return 0
		}
		select {
		case err := <-exited:
			fmt.Fprintf(inv.Stderr, "the daemon exited at start: %v\n", err)
			return 1
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(inv.Stderr, "the daemon did not answer on %s within 10s\n", filepath.Join(pipeDir, "control"))
			return 1
		}
	}
}

// sendOne sends one command and prints its answer; a refused command
// prints the daemon's error and exits 1.
func sendOne(ctx context.Context, pipeDir string, req wireRequest, inv Invocation) int {
	out, err := sendStandIn(ctx, pipeDir, req)
	if err != nil {
		fmt.Fprintln(inv.Stderr, err)
		return 1
	}
	_, _ = io.WriteString(inv.Stdout, out)
	return 0
}

// sendLines is the legacy shell: each line of stdin is a command; any
// failed command makes the exit status 1.
func sendLines(ctx context.Context, pipeDir string, inv Invocation) int {
	if inv.Stdin == nil {
		return 0
	}
	status := 0
	sc := bufio.NewScanner(inv.Stdin)
	for sc.Scan() {
		words := strings.Fields(sc.Text())
		if len(words) == 0 {
			continue
		}
		if code := sendOne(ctx, pipeDir, wireRequest{Transport: transportStdin, Args: words}, inv); code != 0 {
			status = code
		}
	}
	return status
}

// runStandInClient is `standin client`: a CUDA program starting under
// classic MPS, in the view its environment describes (see the package
// comment). It exits 0 once served (after holding, when told to), 1 with
// the reason otherwise.
func runStandInClient(ctx context.Context, inv Invocation, pipeDir string) int {
	shm := envOr(inv.Getenv, EnvClientShm, "/dev/shm")
	if fi, err := os.Stat(shm); err != nil || !fi.IsDir() {
		fmt.Fprintf(inv.Stderr, "MPS client: its /dev/shm %s is not a directory: %v\n", shm, err)
		return 1
	}
	uid := os.Getuid()
	if v := inv.Getenv(EnvClientUID); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fmt.Fprintf(inv.Stderr, "%s=%s is not a UID\n", EnvClientUID, v)
			return 2
		}
		uid = n
	}
	hold := inv.Getenv(EnvClientHold)
	var holdFor time.Duration
	if hold != "" && hold != "stdin" {
		d, err := time.ParseDuration(hold)
		if err != nil || d < 0 {
			fmt.Fprintf(inv.Stderr, "%s=%s: want a duration or stdin\n", EnvClientHold, hold)
			return 2
		}
		holdFor = d
	}
	if inv.Getenv(EnvClientWritesPipe) == "1" {
		// A driver whose client would create an entry of its own in the
		// pipe directory (not seen on r580), switched on.
		if inv.Getenv(EnvClientPipeRO) == "1" {
			fmt.Fprintf(inv.Stderr, "MPS client: creating its entry in the pipe directory %s: read-only file system\n", pipeDir)
			return 1
		}
		entry := filepath.Join(pipeDir, fmt.Sprintf("standin-client-%d", os.Getpid()))
		if err := os.WriteFile(entry, nil, 0o600); err != nil {
			fmt.Fprintf(inv.Stderr, "MPS client: creating its entry in the pipe directory: %v\n", err)
			return 1
		}
		defer func() { _ = os.Remove(entry) }()
	}
	server, conn, err := connectStandInClient(ctx, pipeDir, uid)
	if err != nil {
		// rule: classic-client-pipe.
		fmt.Fprintf(inv.Stderr, "MPS client: %v\n", err)
		return 1
	}
	// Connected until it exits: the daemon counts it on its server.
	defer func() { _ = conn.Close() }()
	fmt.Fprintln(inv.Stdout, "connected to "+strings.TrimSpace(server))
	switch {
	case hold == "stdin" && inv.Stdin != nil:
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, inv.Stdin)
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
	case holdFor > 0:
		select {
		case <-time.After(holdFor):
		case <-ctx.Done():
		}
	}
	return 0
}

// connectStandInClient asks the daemon of pipeDir for an MPS server for a
// client of uid, waiting as long as the daemon queues it (or until ctx
// ends), and returns the server's name and the open connection, which
// the client holds while it runs.
func connectStandInClient(ctx context.Context, pipeDir string, uid int) (string, net.Conn, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", filepath.Join(pipeDir, "control"))
	if err != nil {
		return "", nil, fmt.Errorf("cannot find MPS control daemon process (pipe directory %s): %w", pipeDir, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	req := wireRequest{Transport: transportClient, Args: []string{"client", fmt.Sprintf("--uid=%d", uid)}}
	var reply wireReply
	if err := json.NewEncoder(conn).Encode(req); err == nil {
		err = json.NewDecoder(conn).Decode(&reply)
	}
	if err != nil {
		_ = conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (still waiting for an MPS server)", ctx.Err())
		}
		return "", nil, fmt.Errorf("connecting to the MPS control daemon as user %d: %w", uid, err)
	}
	if reply.Err != "" {
		_ = conn.Close()
		return "", nil, errors.New(reply.Err)
	}
	return reply.Out, conn, nil
}

// Probe reports whether a stand-in daemon listens on pipeDir.
func Probe(ctx context.Context, pipeDir string) error {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", filepath.Join(pipeDir, "control"))
	if err != nil {
		return fmt.Errorf("cannot find MPS control daemon process (pipe directory %s): %w", pipeDir, err)
	}
	return conn.Close()
}

// sendStandIn sends one request to the stand-in daemon of pipeDir and
// returns its answer; a refusal becomes the error. It gives up when ctx
// ends, like a client killed at its deadline.
func sendStandIn(ctx context.Context, pipeDir string, req wireRequest) (string, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", filepath.Join(pipeDir, "control"))
	if err != nil {
		return "", fmt.Errorf("cannot find MPS control daemon process (pipe directory %s): %w", pipeDir, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	command := strings.Join(req.Args, " ")
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return "", fmt.Errorf("sending %q to the MPS control daemon: %w", command, err)
	}
	var reply wireReply
	if err := json.NewDecoder(conn).Decode(&reply); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return "", fmt.Errorf("reading the MPS control daemon's answer to %q: %w", command, err)
	}
	if reply.Err != "" {
		return "", errors.New(reply.Err)
	}
	return reply.Out, nil
}

// Runner runs the stand-in control program in this process, behind
// the same Runner interface as the real binary (ExecCommander): argv[0] is
// ignored, env is the program's whole environment. The plugin uses it on
// fake GPUs, where there is no control binary.
type Runner struct{}

// Run runs the stand-in client with argv and the given standard input.
func (Runner) Run(ctx context.Context, argv, env []string, stdin string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("running the stand-in MPS control: empty command")
	}
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var out bytes.Buffer
	code := Run(ctx, Invocation{Args: argv[1:], Getenv: func(k string) string { return vars[k] },
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &out})
	if code != 0 {
		err := fmt.Errorf("exit status %d", code)
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return out.Bytes(), fmt.Errorf("running %s (stand-in): %w (output: %q)", strings.Join(argv, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return out.Bytes(), nil
}

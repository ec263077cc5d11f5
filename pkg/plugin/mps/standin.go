package mps

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// The stand-in MPS control daemon takes the place of nvidia-cuda-mps-control
// where no GPU is: for fake GPUs (`dra-kubelet-plugin mps-daemon --simulate`)
// and in a mock driver root (hack/mock-driver-root, whose
// nvidia-cuda-mps-control is StandInMain). It speaks the control commands
// of NVIDIA's documentation on the control socket of the pipe directory,
// keeps their state (servers, default limits, MPS v3 servers and
// namespaces), and logs every command to <log directory>/control.log, so
// tests can see what the plugin asked for. It never starts an MPS server
// and enforces nothing. Its wire format (one command per connection, the
// reply until EOF) is its own: NVIDIA's is not public.

// StandInConfig configures a stand-in daemon.
type StandInConfig struct {
	// PipeDir holds the control socket.
	PipeDir string
	// LogDir receives control.log; empty for no log.
	LogDir string
	// Protocol is 2 (legacy MPS) or 3 (MPS v3 module verb commands).
	Protocol  int
	MultiUser bool
}

// standInControlLog is the log file, named like the real daemon's.
const standInControlLog = "control.log"

// standInCommandMark precedes each command in control.log.
const standInCommandMark = " Cmd:"

// RunStandInControlDaemon serves the control socket until ctx ends or a
// client sends quit. A socket left by an earlier run is replaced.
func RunStandInControlDaemon(ctx context.Context, cfg StandInConfig) error {
	logger := klog.FromContext(ctx)
	if cfg.Protocol == 0 {
		cfg.Protocol = 2
	}
	if cfg.Protocol != 2 && cfg.Protocol != 3 {
		return fmt.Errorf("stand-in MPS daemon: protocol %d: want 2 or 3", cfg.Protocol)
	}
	if err := os.MkdirAll(cfg.PipeDir, 0o755); err != nil {
		return fmt.Errorf("creating MPS pipe directory %s: %w", cfg.PipeDir, err)
	}
	socket := filepath.Join(cfg.PipeDir, "control")
	// A socket left by an earlier run (the container was restarted) would
	// make Listen fail; only this process may own it.
	if fi, err := os.Lstat(socket); err == nil && fi.Mode().Type() == fs.ModeSocket {
		if err := os.Remove(socket); err != nil {
			return fmt.Errorf("removing stale control socket %s: %w", socket, err)
		}
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("stand-in MPS daemon: listening on %s: %w", socket, err)
	}
	d := &standIn{cfg: cfg, defaultATP: 100, defaultPinned: map[string]string{}, servers: map[int]*standInServer{},
		v3Servers: map[string]map[string]string{}, namespaces: map[string]map[string]string{}}
	d.log(fmt.Sprintf("Control daemon started (stand-in): protocol %d, multi-user %v, CUDA_VISIBLE_DEVICES=%s", cfg.Protocol, cfg.MultiUser, os.Getenv("CUDA_VISIBLE_DEVICES")))
	logger.Info("Stand-in MPS control daemon listening: no MPS server runs and nothing is enforced", "socket", socket, "protocol", cfg.Protocol)
	quit := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-quit:
		}
		_ = listener.Close()
	}()
	var once sync.Once
	for {
		conn, err := listener.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				d.log("Control daemon stopped")
				logger.Info("Stand-in MPS control daemon stopped", "socket", socket)
				return nil
			}
			return fmt.Errorf("stand-in MPS daemon: accepting on %s: %w", socket, err)
		}
		if d.serve(conn) {
			once.Do(func() { close(quit) })
		}
	}
}

// serve answers one connection; true when the command was quit. A
// connection that sends nothing (a readiness probe) is closed.
func (d *standIn) serve(conn net.Conn) bool {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "" {
		_ = err // EOF before a command: a probe
		return false
	}
	d.log(standInCommandMark[1:] + line)
	reply, quit, cmdErr := d.execute(line)
	if cmdErr != nil {
		reply = "error: " + cmdErr.Error() + "\n"
	}
	_, _ = conn.Write([]byte(reply))
	return quit
}

func (d *standIn) log(msg string) {
	if d.cfg.LogDir == "" {
		return
	}
	line := "[" + time.Now().Format("2006-01-02 15:04:05.000") + "] " + msg + "\n"
	f, err := os.OpenFile(filepath.Join(d.cfg.LogDir, standInControlLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return // the log is for tests; serving matters more
	}
	_, _ = f.WriteString(line)
	_ = f.Close()
}

// SendStandInCommand sends one command to the stand-in daemon of pipeDir
// and returns its reply; a reply that is an error becomes the error.
func SendStandInCommand(ctx context.Context, pipeDir, command string) (string, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", filepath.Join(pipeDir, "control"))
	if err != nil {
		return "", fmt.Errorf("cannot find MPS control daemon process (pipe directory %s): %w", pipeDir, err)
	}
	defer func() { _ = conn.Close() }()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte(strings.TrimSpace(command) + "\n")); err != nil {
		return "", fmt.Errorf("sending %q to the MPS control daemon: %w", command, err)
	}
	var reply strings.Builder
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		reply.WriteString(sc.Text())
		reply.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading the MPS control daemon's reply to %q: %w", command, err)
	}
	out := reply.String()
	if msg, ok := strings.CutPrefix(out, "error: "); ok {
		return "", errors.New(strings.TrimSpace(msg))
	}
	return out, nil
}

// StandInCommands returns the commands control.log in logDir recorded, in
// order.
func StandInCommands(logDir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(logDir, standInControlLog))
	if err != nil {
		return nil, fmt.Errorf("reading the stand-in MPS daemon's log: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if _, cmd, ok := strings.Cut(line, standInCommandMark); ok {
			out = append(out, cmd)
		}
	}
	return out, nil
}

type standInServer struct {
	uid    int
	atp    string
	pinned map[string]string
}

// standIn is the daemon's state; execute is called from one goroutine.
type standIn struct {
	cfg           StandInConfig
	defaultATP    float64
	defaultPinned map[string]string
	servers       map[int]*standInServer
	nextPID       int
	// MPS v3: named servers (name -> options) and namespaces
	// ("<server>/<name>" -> settings, "server" and "name" among them).
	v3Servers  map[string]map[string]string
	namespaces map[string]map[string]string
}

var pinnedLimitForm = regexp.MustCompile(`^[0-9]+[KMGT]?$`)

func percentage(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p <= 0 || p > 100 {
		return 0, fmt.Errorf("%q is not a percentage in (0, 100]", s)
	}
	return p, nil
}

func (d *standIn) server(pid string) (*standInServer, error) {
	n, err := strconv.Atoi(pid)
	if err == nil {
		if s, ok := d.servers[n]; ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no MPS server with PID %s", pid)
}

// execute runs one command: the reply, whether the daemon quits, or an
// error (a wrong command or argument).
func (d *standIn) execute(line string) (string, bool, error) {
	f := strings.Fields(line)
	args := f[1:]
	want := func(n int, usage string) error {
		if len(args) != n {
			return fmt.Errorf("usage: %s", usage)
		}
		return nil
	}
	switch f[0] {
	case "quit":
		if len(args) != 0 && (len(args) != 2 || args[0] != "-t") {
			return "", false, errors.New("usage: quit [-t <timeout>]")
		}
		return "", true, nil
	case "get_server_list":
		var pids []int
		for pid := range d.servers {
			pids = append(pids, pid)
		}
		slices.Sort(pids)
		var b strings.Builder
		for _, pid := range pids {
			fmt.Fprintf(&b, "%d\n", pid)
		}
		return b.String(), false, nil
	case "start_server":
		if len(args) != 2 || args[0] != "-uid" {
			return "", false, errors.New("usage: start_server -uid <uid>")
		}
		uid, err := strconv.Atoi(args[1])
		if err != nil || uid < 0 {
			return "", false, fmt.Errorf("%q is not a UID", args[1])
		}
		d.nextPID++
		d.servers[100000+d.nextPID] = &standInServer{uid: uid, pinned: map[string]string{}}
		return "", false, nil
	case "shutdown_server":
		if len(args) < 1 || len(args) > 2 || (len(args) == 2 && args[1] != "-f") {
			return "", false, errors.New("usage: shutdown_server <pid> [-f]")
		}
		if _, err := d.server(args[0]); err != nil {
			return "", false, err
		}
		pid, _ := strconv.Atoi(args[0])
		delete(d.servers, pid)
		return "", false, nil
	case "get_client_list":
		if err := want(1, "get_client_list <pid>"); err != nil {
			return "", false, err
		}
		_, err := d.server(args[0])
		return "", false, err
	case "set_default_active_thread_percentage":
		if err := want(1, "set_default_active_thread_percentage <percentage>"); err != nil {
			return "", false, err
		}
		p, err := percentage(args[0])
		if err != nil {
			return "", false, err
		}
		d.defaultATP = p
		return fmt.Sprintf("%.1f\n", p), false, nil
	case "get_default_active_thread_percentage":
		return fmt.Sprintf("%.1f\n", d.defaultATP), false, nil
	case "set_active_thread_percentage":
		if err := want(2, "set_active_thread_percentage <pid> <percentage>"); err != nil {
			return "", false, err
		}
		s, err := d.server(args[0])
		if err != nil {
			return "", false, err
		}
		if _, err := percentage(args[1]); err != nil {
			return "", false, err
		}
		s.atp = args[1]
		return "", false, nil
	case "set_default_device_pinned_mem_limit":
		if err := want(2, "set_default_device_pinned_mem_limit <device> <limit, e.g. 2G>"); err != nil {
			return "", false, err
		}
		if !pinnedLimitForm.MatchString(args[1]) {
			return "", false, fmt.Errorf("%q is not a memory limit (e.g. 2G, 512M)", args[1])
		}
		d.defaultPinned[args[0]] = args[1]
		return "", false, nil
	case "get_default_device_pinned_mem_limit":
		if err := want(1, "get_default_device_pinned_mem_limit <device>"); err != nil {
			return "", false, err
		}
		if v, ok := d.defaultPinned[args[0]]; ok {
			return v + "\n", false, nil
		}
		return "0\n", false, nil
	case "set_device_pinned_mem_limit":
		if err := want(3, "set_device_pinned_mem_limit <pid> <device> <limit>"); err != nil {
			return "", false, err
		}
		s, err := d.server(args[0])
		if err != nil {
			return "", false, err
		}
		if !pinnedLimitForm.MatchString(args[2]) {
			return "", false, fmt.Errorf("%q is not a memory limit (e.g. 2G, 512M)", args[2])
		}
		s.pinned[args[1]] = args[2]
		return "", false, nil
	case "server", "namespace":
		if d.cfg.Protocol != 3 {
			return "", false, fmt.Errorf("unknown command %q: MPS v3 module commands need a daemon started with -p 3", f[0])
		}
		return d.executeV3(f[0], args)
	}
	return "", false, fmt.Errorf("unknown command %q", f[0])
}

// executeV3 runs the MPS v3 "<module> <verb>" commands the plugin uses,
// in the form NVIDIA documents for driver release 615 (MPS v3 Interface;
// see docs/nvml.md): named servers and their namespaces, options as
// --name=value, lists in CSV with --format=csv. A server's and a
// namespace's pipe subdirectories (<pipe>/<server>/<namespace>/), through
// which a client reaches its namespace, are created and removed with them.
func (d *standIn) executeV3(module string, args []string) (string, bool, error) {
	if len(args) == 0 {
		return "", false, fmt.Errorf("usage: %s <create|delete|list|set|get> ...", module)
	}
	verb := args[0]
	names, opts, err := v3Args(args[1:])
	if err != nil {
		return "", false, err
	}
	csv := opts["format"] == "csv"
	if f, ok := opts["format"]; ok && f != "csv" {
		return "", false, fmt.Errorf("--format=%s: only csv is known", f)
	}
	delete(opts, "format")
	switch module + " " + verb {
	case "server create":
		if len(names) > 1 {
			return "", false, errors.New("usage: server create [<name>] [--uid=<uid>] [--allowed-devices=<uuid>,...]")
		}
		name := "default"
		if len(names) == 1 {
			name = names[0]
		}
		if _, ok := d.v3Servers[name]; ok {
			return "", false, fmt.Errorf("server %s exists", name)
		}
		for k := range opts {
			if k != "uid" && k != "allowed-devices" {
				return "", false, fmt.Errorf("server create: unknown option --%s", k)
			}
		}
		if err := d.mkPipeSubdir(name); err != nil {
			return "", false, err
		}
		d.v3Servers[name] = opts
		return "", false, nil
	case "server delete":
		if len(names) != 1 {
			return "", false, errors.New("usage: server delete <name>")
		}
		if _, ok := d.v3Servers[names[0]]; !ok {
			return "", false, fmt.Errorf("no server %s", names[0])
		}
		for _, ns := range slices.Sorted(maps.Keys(d.namespaces)) {
			if d.namespaces[ns]["server"] == names[0] {
				return "", false, fmt.Errorf("server %s still has namespace %s", names[0], d.namespaces[ns]["name"])
			}
		}
		delete(d.v3Servers, names[0])
		d.rmPipeSubdir(names[0])
		return "", false, nil
	case "server list":
		var rows [][]string
		for _, name := range slices.Sorted(maps.Keys(d.v3Servers)) {
			o := d.v3Servers[name]
			rows = append(rows, []string{name, "running", o["uid"], o["allowed-devices"]})
		}
		return v3Table(csv, []string{"name", "status", "uid", "allowed_devices"}, rows), false, nil
	case "namespace create", "namespace delete", "namespace set", "namespace get":
		if len(names) != 1 || opts["server"] == "" {
			return "", false, fmt.Errorf("usage: namespace %s <name> --server=<server> [--<setting>=<value>...]", verb)
		}
		server, name := opts["server"], names[0]
		delete(opts, "server")
		key := server + "/" + name
		if _, ok := d.v3Servers[server]; !ok {
			return "", false, fmt.Errorf("no server %s", server)
		}
		settings, exists := d.namespaces[key]
		switch verb {
		case "create":
			if exists {
				return "", false, fmt.Errorf("namespace %s exists on server %s", name, server)
			}
			if len(opts) > 0 {
				return "", false, errors.New("namespace create takes no settings; use namespace set")
			}
			if err := d.mkPipeSubdir(server, name); err != nil {
				return "", false, err
			}
			d.namespaces[key] = map[string]string{"server": server, "name": name}
			return "", false, nil
		case "delete":
			if !exists {
				return "", false, fmt.Errorf("no namespace %s on server %s", name, server)
			}
			delete(d.namespaces, key)
			d.rmPipeSubdir(server, name)
			return "", false, nil
		case "set":
			if !exists {
				return "", false, fmt.Errorf("no namespace %s on server %s", name, server)
			}
			for k, v := range opts {
				switch k {
				case "active-thread-percentage":
					if _, err := percentage(v); err != nil {
						return "", false, err
					}
				case "pinned-memory-limit":
					if !pinnedLimitForm.MatchString(v) {
						return "", false, fmt.Errorf("%q is not a memory limit (e.g. 2G, 512M)", v)
					}
				case "client-priority":
				default:
					return "", false, fmt.Errorf("namespace set: unknown setting --%s", k)
				}
			}
			for k, v := range opts {
				settings[k] = v
			}
			return "", false, nil
		default: // get
			if !exists {
				return "", false, fmt.Errorf("no namespace %s on server %s", name, server)
			}
			return v3Table(csv, namespaceColumns, [][]string{namespaceRow(settings)}), false, nil
		}
	case "namespace list":
		var rows [][]string
		for _, key := range slices.Sorted(maps.Keys(d.namespaces)) {
			settings := d.namespaces[key]
			if s := opts["server"]; s != "" && settings["server"] != s {
				continue
			}
			rows = append(rows, namespaceRow(settings))
		}
		return v3Table(csv, namespaceColumns, rows), false, nil
	}
	return "", false, fmt.Errorf("unknown command %q", module+" "+verb)
}

var namespaceColumns = []string{"server", "name", "active_thread_percentage", "pinned_memory_limit", "client_priority"}

func namespaceRow(s map[string]string) []string {
	return []string{s["server"], s["name"], s["active-thread-percentage"], s["pinned-memory-limit"], s["client-priority"]}
}

// v3Args splits arguments into names and --key=value options.
func v3Args(args []string) ([]string, map[string]string, error) {
	var names []string
	opts := map[string]string{}
	for _, a := range args {
		opt, ok := strings.CutPrefix(a, "--")
		if !ok {
			names = append(names, a)
			continue
		}
		k, v, ok := strings.Cut(opt, "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("%q is not --<option>=<value>", a)
		}
		opts[k] = v
	}
	return names, opts, nil
}

// v3Table renders rows as CSV with a header, or as space-separated lines.
func v3Table(csv bool, header []string, rows [][]string) string {
	var b strings.Builder
	sep := " "
	if csv {
		sep = ","
		b.WriteString(strings.Join(header, sep) + "\n")
	}
	for _, r := range rows {
		b.WriteString(strings.Join(r, sep) + "\n")
	}
	return b.String()
}

// mkPipeSubdir creates <pipe>/<parts...>, where the real daemon puts the
// sockets of a server or namespace.
func (d *standIn) mkPipeSubdir(parts ...string) error {
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00") {
			return fmt.Errorf("%q is not a valid name", p)
		}
	}
	dir := filepath.Join(append([]string{d.cfg.PipeDir}, parts...)...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return nil
}

func (d *standIn) rmPipeSubdir(parts ...string) {
	_ = os.RemoveAll(filepath.Join(append([]string{d.cfg.PipeDir}, parts...)...))
}

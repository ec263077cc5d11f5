package standin

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The stand-in daemon's state and commands. Each rule the real tool is
// documented to enforce is marked "rule:"; TestStandInRules has each with
// its source.

// legacyServer is an MPS server as the legacy commands see it, by PID:
// its UID and the limits set on it.
type legacyServer struct {
	uid    int
	atp    string
	pinned map[string]string
}

// v3Server is an MPS v3 server: a name, a UID, devices, namespaces.
type v3Server struct {
	name       string
	uid        int
	devices    string
	pid        int
	namespaces map[string]*v3Namespace
}

type v3Namespace struct {
	// atp is the active-thread percentage, 0 for none set.
	atp float64
	// pinnedBytes is the pinned-memory limit, 0 for none set.
	pinnedBytes int64
	priority    string
	// clients are the attached clients by PID.
	clients map[int]v3Client
}

// v3Client is an attached MPS v3 client: the device it runs on and its
// command, as `client list` shows them.
type v3Client struct {
	device, command string
}

// daemonState is the daemon's state; mu guards it.
type daemonState struct {
	cfg   Config
	logMu sync.Mutex

	mu            sync.Mutex
	defaultATP    float64
	defaultPinned map[string]string
	servers       map[int]*legacyServer
	nextPID       int
	v3Servers     map[string]*v3Server
	// classic is the MPS server the daemon started for classic clients;
	// nil until the first. clientLeft is closed and replaced whenever a
	// classic client leaves, waking the queued ones.
	classic    *classicServer
	clientLeft chan struct{}
}

// classicServer is the MPS server of a classic (protocol 2) daemon: it
// runs as the UID of the client it was started for and counts its
// connected clients.
type classicServer struct {
	pid, uid, clients int
}

func newDaemonState(cfg Config) *daemonState {
	return &daemonState{cfg: cfg, defaultATP: 100, defaultPinned: map[string]string{},
		servers: map[int]*legacyServer{}, v3Servers: map[string]*v3Server{}, clientLeft: make(chan struct{})}
}

var (
	pinnedLimitForm = regexp.MustCompile(`^[0-9]+[KMGT]?$`)
	// rule: v3-size-unit. A v3 size names its unit.
	v3SizeForm = regexp.MustCompile(`^([0-9]+)([KMGT])$`)
	// rule: ns-name.
	standInNamespaceNameForm = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

func percentage(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p <= 0 || p > 100 {
		return 0, fmt.Errorf("%q is not a percentage in (0, 100]", s)
	}
	return p, nil
}

func (d *daemonState) server(pid string) (*legacyServer, error) {
	n, err := strconv.Atoi(pid)
	if err == nil {
		if s, ok := d.servers[n]; ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no MPS server with PID %s", pid)
}

// execute runs one command: the reply, whether the daemon quits, or an
// error (a wrong command or argument, or one the protocol refuses).
func (d *daemonState) execute(req wireRequest) (string, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.Transport == transportFlag {
		if slices.Equal(req.Args, []string{"quit"}) {
			return "", true, nil
		}
		return "", false, fmt.Errorf("unknown option %q", strings.Join(req.Args, " "))
	}
	switch d.cfg.Protocol {
	case 3:
		if req.Transport != transportArgv {
			// rule: v3-no-stdin.
			return "", false, errors.New("MPS v3 (protocol 3) has no interactive shell: give the command as arguments, nvidia-cuda-mps-control <module> <verb> ...; quit is -q")
		}
		return d.executeV3(req.Args)
	default:
		if req.Transport != transportStdin {
			// rule: v2-stdin.
			return "", false, fmt.Errorf("unknown option %q: legacy MPS (protocol 2) reads its commands on standard input; <module> <verb> arguments need a daemon started with -p 3", req.Args[0])
		}
		return d.executeLegacy(req.Args)
	}
}

// executeLegacy runs the legacy (protocol 2) commands of NVIDIA's MPS
// documentation, one line of the interactive shell each.
func (d *daemonState) executeLegacy(f []string) (string, bool, error) {
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
		var b strings.Builder
		pids := slices.Collect(maps.Keys(d.servers))
		if d.classic != nil {
			pids = append(pids, d.classic.pid)
		}
		slices.Sort(pids)
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
		d.servers[100000+d.nextPID] = &legacyServer{uid: uid, pinned: map[string]string{}}
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
	}
	return "", false, fmt.Errorf("unknown command %q", f[0])
}

// mkPipeSubdir creates <pipe>/<parts...>, where the real daemon puts the
// sockets of a server or namespace.
func (d *daemonState) mkPipeSubdir(parts ...string) error {
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

func (d *daemonState) rmPipeSubdir(parts ...string) {
	_ = os.RemoveAll(filepath.Join(append([]string{d.cfg.PipeDir}, parts...)...))
}

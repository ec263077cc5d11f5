package standin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Config configures a stand-in daemon.
type Config struct {
	// PipeDir holds the control socket.
	PipeDir string
	// LogDir receives control.log; empty for no log.
	LogDir string
	// Protocol is 2 (legacy MPS) or 3 (MPS v3 module verb commands).
	Protocol  int
	MultiUser bool
	// UnderscoreColumns spells multi-word CSV columns with underscores.
	UnderscoreColumns bool
	// Hang lists the commands that never answer (see the package comment).
	Hang []string
}

// Names of the stand-in's switches (environment variables).
const (
	EnvCSVSpelling = "TANGRAM_STANDIN_MPS_CSV_SPELLING"
	EnvStdinEOF    = "TANGRAM_STANDIN_MPS_STDIN_EOF"
	EnvHang        = "TANGRAM_STANDIN_MPS_HANG"
	// The view of a stand-in client (`standin client`), see above.
	EnvClientShm         = "TANGRAM_STANDIN_MPS_CLIENT_SHM"
	EnvClientUID         = "TANGRAM_STANDIN_MPS_CLIENT_UID"
	EnvClientHold        = "TANGRAM_STANDIN_MPS_CLIENT_HOLD"
	EnvClientPipeRO      = "TANGRAM_STANDIN_MPS_CLIENT_PIPE_RO"
	EnvClientWritesPipe  = "TANGRAM_STANDIN_MPS_CLIENT_WRITES_PIPE"
	standInClientCommand = "standin client"
	// HangFile, in the log directory, lists commands that hang.
	HangFile = "standin-hang"
)

// standInControlLog is the log file, named like the real daemon's.
const standInControlLog = "control.log"

// Command lines in control.log: "[time] Cmd[<transport>]: <command>".
const (
	standInCommandMark = " Cmd["
	standInRejectMark  = " Rejected: "
)

// How a command reached the daemon.
const (
	transportStdin = "stdin" // a line of the legacy interactive shell
	transportArgv  = "argv"  // command-line arguments (MPS v3)
	transportFlag  = "flag"  // a top-level option (-q)
	// transportClient is a CUDA client connecting (standin client), not a
	// command.
	transportClient = "client"
)

// wireRequest is one command from the stand-in client.
type wireRequest struct {
	Transport string   `json:"transport"`
	Args      []string `json:"args"`
}

type wireReply struct {
	Out string `json:"out,omitempty"`
	Err string `json:"err,omitempty"`
}

// The daemon's files in its pipe directory, named as the real daemon's
// (NVIDIA-FACTS.md, "Round two").
const (
	controlSocketName = "control"
	pidFileName       = "nvidia-cuda-mps-control.pid"
	// maxSocketPath is Linux's limit on a Unix socket's path: sun_path
	// holds 108 bytes with the NUL (unix(7)). Every server and namespace
	// endpoint is such a socket (rule: socket-path).
	maxSocketPath = 107
)

// RunDaemon serves the control socket until ctx ends or a client sends
// quit, with its PID file beside it; a clean stop removes both. Like the
// real daemon it cannot start over the socket of one that did not stop
// cleanly (rule: stale-socket): whoever starts it must remove a socket
// nobody listens on first.
func RunDaemon(ctx context.Context, cfg Config) error {
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
	socket := filepath.Join(cfg.PipeDir, controlSocketName)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("stand-in MPS daemon: listening on %s: %w", socket, err)
	}
	pidFile := filepath.Join(cfg.PipeDir, pidFileName)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		_ = listener.Close()
		return fmt.Errorf("stand-in MPS daemon: writing %s: %w", pidFile, err)
	}
	// Closing the listener removes the socket; the PID file goes with it.
	defer func() { _ = os.Remove(pidFile) }()
	d := newDaemonState(cfg)
	d.log(fmt.Sprintf("Control daemon started (stand-in): protocol %d, multi-user %v, CUDA_VISIBLE_DEVICES=%s", cfg.Protocol, cfg.MultiUser, os.Getenv("CUDA_VISIBLE_DEVICES")))
	logger.Info("Stand-in MPS control daemon listening: no MPS server runs and nothing is enforced", "socket", socket, "protocol", cfg.Protocol)
	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		<-serveCtx.Done()
		_ = listener.Close()
	}()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		conn, err := listener.Accept()
		if err != nil {
			if serveCtx.Err() != nil || errors.Is(err, net.ErrClosed) {
				d.log("Control daemon stopped")
				logger.Info("Stand-in MPS control daemon stopped", "socket", socket)
				return nil
			}
			return fmt.Errorf("stand-in MPS daemon: accepting on %s: %w", socket, err)
		}
		// One goroutine per connection: a command made to hang holds its
		// own connection only.
		conns.Add(1)
		go func() {
			defer conns.Done()
			if d.serve(serveCtx, conn) {
				stop()
			}
		}()
	}
}

// serve answers one connection; true when the command was quit. A
// connection that sends nothing (a readiness probe) is closed.
func (d *daemonState) serve(ctx context.Context, conn net.Conn) bool {
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	if len(strings.TrimSpace(string(line))) == 0 {
		_ = err // EOF before a command: a probe
		return false
	}
	var req wireRequest
	if err := json.Unmarshal(line, &req); err != nil || len(req.Args) == 0 {
		_ = json.NewEncoder(conn).Encode(wireReply{Err: fmt.Sprintf("malformed request %q", strings.TrimSpace(string(line)))})
		return false
	}
	command := strings.Join(req.Args, " ")
	d.log(standInCommandMark[1:] + req.Transport + "]: " + command)
	if req.Transport == transportClient {
		d.serveClient(ctx, conn, r, req.Args)
		return false
	}
	if d.hangs(req.Args) {
		d.log("Hanging (stand-in switch): " + command)
		<-ctx.Done()
		return false
	}
	out, quit, cmdErr := d.execute(req)
	reply := wireReply{Out: out}
	if cmdErr != nil {
		reply.Err = cmdErr.Error()
		d.log(standInRejectMark[1:] + cmdErr.Error())
	}
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = json.NewEncoder(conn).Encode(reply)
	return quit
}

// serveClient serves a classic CUDA client (`standin client`, args
// "client --uid=<uid>"): once an MPS server of the daemon may serve it
// (admitClient), it answers with the server, then counts the client as
// connected until it closes its connection.
func (d *daemonState) serveClient(ctx context.Context, conn net.Conn, r *bufio.Reader, args []string) {
	reply := func(rep wireReply) {
		if rep.Err != "" {
			d.log(standInRejectMark[1:] + rep.Err)
		}
		_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_ = json.NewEncoder(conn).Encode(rep)
	}
	if d.cfg.Protocol == 3 {
		// rule: v3-client-namespace.
		reply(wireReply{Err: "MPS v3: a client connects through its namespace's pipe directory (namespace get <ns> pipe-directory), not the control daemon's"})
		return
	}
	uid := -1
	for _, a := range args[1:] {
		if v, ok := strings.CutPrefix(a, "--uid="); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				uid = n
			}
		}
	}
	if uid < 0 {
		reply(wireReply{Err: fmt.Sprintf("malformed client request %q: want client --uid=<uid>", strings.Join(args, " "))})
		return
	}
	// The client sends nothing more: its connection ends when it exits.
	_ = conn.SetReadDeadline(time.Time{})
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r)
		close(gone)
	}()
	s, err := d.admitClient(ctx, uid, gone)
	if err != nil {
		reply(wireReply{Err: err.Error()})
		return
	}
	reply(wireReply{Out: fmt.Sprintf("MPS server %d of user %d\n", s.pid, s.uid)})
	select {
	case <-gone:
	case <-ctx.Done():
	}
	d.mu.Lock()
	s.clients--
	close(d.clientLeft)
	d.clientLeft = make(chan struct{})
	d.mu.Unlock()
	d.log(fmt.Sprintf("Client of user %d left server %d", uid, s.pid))
}

// admitClient finds the MPS server that serves a client of uid, starting
// one if needed, and counts the client on it. Without multi-user mode a
// server serves its own UID only (rule: classic-client-users): a client of
// another UID waits until the running server's clients are all done, then
// the server is replaced by one of the client's UID.
func (d *daemonState) admitClient(ctx context.Context, uid int, gone <-chan struct{}) (*classicServer, error) {
	queued := false
	for {
		d.mu.Lock()
		s := d.classic
		switch {
		case s != nil && (s.uid == uid || d.cfg.MultiUser):
		case s == nil || s.clients == 0:
			d.nextPID++
			next := &classicServer{pid: 200000 + d.nextPID, uid: uid}
			if s != nil {
				d.log(fmt.Sprintf("Server %d of user %d exited: a client of user %d was waiting", s.pid, s.uid, uid))
			}
			d.log(fmt.Sprintf("Starting new server %d for user %d", next.pid, uid))
			d.classic, s = next, next
		default:
			if !queued {
				d.log(fmt.Sprintf("Client of user %d queued: server %d of user %d has %d client(s) and shuts down when they are done (a daemon started with -M serves every user at once)", uid, s.pid, s.uid, s.clients))
				queued = true
			}
			left := d.clientLeft
			d.mu.Unlock()
			select {
			case <-left:
				continue
			case <-gone:
				return nil, fmt.Errorf("the client of user %d left while queued", uid)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		s.clients++
		d.mu.Unlock()
		return s, nil
	}
}

// hangs reports whether the command is one the switch or the hang file
// names.
func (d *daemonState) hangs(args []string) bool {
	list := d.cfg.Hang
	if d.cfg.LogDir != "" {
		if data, err := os.ReadFile(filepath.Join(d.cfg.LogDir, HangFile)); err == nil {
			list = append(append([]string(nil), list...), ParseHang(string(data))...)
		}
	}
	for _, h := range list {
		words := strings.Fields(h)
		if len(words) > 0 && len(words) <= len(args) && strings.Join(args[:len(words)], " ") == strings.Join(words, " ") {
			return true
		}
	}
	return false
}

// ParseHang reads the hang switch's form: commands separated by
// commas or new lines.
func ParseHang(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (d *daemonState) log(msg string) {
	if d.cfg.LogDir == "" {
		return
	}
	line := "[" + time.Now().Format("2006-01-02 15:04:05.000") + "] " + msg + "\n"
	d.logMu.Lock()
	defer d.logMu.Unlock()
	f, err := os.OpenFile(filepath.Join(d.cfg.LogDir, standInControlLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return // the log is for tests; serving matters more
	}
	_, _ = f.WriteString(line)
	_ = f.Close()
}

// LogEntry is one command in the stand-in's control.log.
type LogEntry struct {
	// Transport is how it was given: "argv" (command-line arguments, the
	// MPS v3 form), "stdin" (the legacy shell) or "flag" (-q).
	Transport string
	// Command is its words joined by spaces; -q is logged as quit.
	Command string
	// Rejected is the daemon's error, "" when it was accepted.
	Rejected string
}

// Log returns the commands control.log in logDir recorded, in order.
func Log(logDir string) ([]LogEntry, error) {
	data, err := os.ReadFile(filepath.Join(logDir, standInControlLog))
	if err != nil {
		return nil, fmt.Errorf("reading the stand-in MPS daemon's log: %w", err)
	}
	var out []LogEntry
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, standInCommandMark); ok {
			transport, cmd, _ := strings.Cut(rest, "]: ")
			out = append(out, LogEntry{Transport: transport, Command: cmd})
		} else if _, why, ok := strings.Cut(line, standInRejectMark); ok && len(out) > 0 {
			out[len(out)-1].Rejected = why
		}
	}
	return out, nil
}

// Commands returns the commands (accepted or not) control.log in
// logDir recorded, in order.
func Commands(logDir string) ([]string, error) {
	entries, err := Log(logDir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Command)
	}
	return out, nil
}

// LeaveCrashedDaemon plays a control daemon that died without stopping
// cleanly (killed, a node crash) in pipeDir: the `control` socket, bound
// and closed without being removed so that connecting is refused, and a
// PID file naming a process that is gone. A daemon started over it fails
// to bind, as the real one does.
func LeaveCrashedDaemon(pipeDir string) error {
	if err := os.MkdirAll(pipeDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", pipeDir, err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(pipeDir, controlSocketName), Net: "unix"})
	if err != nil {
		return fmt.Errorf("playing a crashed MPS control daemon: %w", err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		return fmt.Errorf("playing a crashed MPS control daemon: %w", err)
	}
	// PID numbers wrap well below this value on Linux (pid_max is at most
	// 2^22), so it names no live process.
	return os.WriteFile(filepath.Join(pipeDir, pidFileName), []byte("4999999\n"), 0o644)
}

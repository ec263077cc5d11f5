package mps

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// The stand-in MPS control daemon takes the place of nvidia-cuda-mps-control
// where no GPU is: for fake GPUs (`dra-kubelet-plugin mps-daemon --simulate`)
// and in a mock driver root (hack/mock-driver-root, whose
// nvidia-cuda-mps-control is StandInMain). It was written from NVIDIA's
// documentation and from projects that run the real tool on r615 (see
// /work/shared/notes/NVIDIA-FACTS.md and docs/nvml.md, "The stand-in MPS
// control"), not from the plugin's code, and it is as strict as they say
// the real tool is: TestStandInRules (standin_test.go) lists every rule
// with its source and checks each. It keeps the state of the commands (legacy
// servers and defaults; MPS v3 servers, namespaces and clients), logs every
// command with how it was given to <log directory>/control.log, and never
// starts an MPS server or enforces anything.
//
// Its wire format between the client (the CLI) and the daemon is its own
// (NVIDIA's is not public): one JSON request per connection, one JSON reply.
// The client-side command line behaves like the real binary's.
//
// Switches, read by the daemon at start (environment of the -d/-f process):
//
//	TANGRAM_STANDIN_MPS_CSV_SPELLING=hyphen|underscore
//	    how multi-word CSV columns are spelled (pipe-directory or
//	    pipe_directory); NVIDIA's page spells hyphens, KAI reads
//	    underscores: unconfirmed, default hyphen.
//	TANGRAM_STANDIN_MPS_STDIN_EOF=exit|ignore
//	    whether a -f daemon exits when its standard input reaches end of
//	    file (KAI's report for r615; unconfirmed for r620), default exit.
//	TANGRAM_STANDIN_MPS_HANG=<command>[,<command>...]
//	    commands that never answer, for deadline tests: "<module> <verb>"
//	    for MPS v3 (e.g. "namespace set"), the verb for legacy commands
//	    (e.g. "get_server_list"), "quit" for -q / quit. The connection is
//	    held until the daemon stops; other commands are still served. The
//	    file <log directory>/standin-hang, in the same form, is read at
//	    every command, so a running daemon can be made to hang (and stop
//	    hanging) from outside.
//
// A test attaches an MPS client to a namespace with the stand-in's own
// command `nvidia-cuda-mps-control standin attach-client <namespace>
// --server=<server> [--pid=<pid>]` (the real binary has no such command: a
// real client attaches by connecting to the namespace's pipe directory).
//
// `nvidia-cuda-mps-control standin client` plays a CUDA program starting
// under classic MPS, with what NVIDIA documents and a GPU run showed such a
// client needs (rules classic-client-*):
//
//   - it reaches the control daemon only through the daemon's own pipe
//     directory (CUDA_MPS_PIPE_DIRECTORY);
//   - it needs nothing of the MPS server's /dev/shm: on a GPU (driver
//     r580, docs/gpu-reports/2026-11-27-h200-r580-experiments.md) clients
//     with a /dev/shm of their own, a fresh tmpfs or another directory,
//     were served and limited, and no client nor server created a file in
//     /dev/shm or in the pipe directory, so the stand-in creates none;
//   - the daemon serves it by an MPS server of its UID: without multi-user
//     mode (-M) a server runs as the UID of the client it was started for,
//     and a client of another UID is queued until that server's clients
//     are all done, then gets a new server of its own UID
//     (nvidia-cuda-mps-control(1), DESCRIPTION; the GPU run saw a uid 1000
//     client wait 13 s for a root client); with -M one server serves
//     clients of every UID at once.
//
// The client stays connected (counts as the server's client) while it
// holds, then leaves. Its view of a container is given by the environment:
//
//	CUDA_MPS_PIPE_DIRECTORY              the pipe directory it sees
//	TANGRAM_STANDIN_MPS_CLIENT_SHM       the directory its /dev/shm is
//	                                     (default /dev/shm): it must exist
//	                                     and is left as it was
//	TANGRAM_STANDIN_MPS_CLIENT_UID       its UID (default: the process's)
//	TANGRAM_STANDIN_MPS_CLIENT_HOLD      how long it keeps its context once
//	                                     served: a Go duration, or "stdin"
//	                                     (until its standard input ends);
//	                                     default: it leaves at once
//	TANGRAM_STANDIN_MPS_CLIENT_PIPE_RO=1 its pipe directory is a read-only
//	                                     mount (writes there fail)
//	TANGRAM_STANDIN_MPS_CLIENT_WRITES_PIPE=1
//	                                     the client creates an entry in the
//	                                     pipe directory: a real classic
//	                                     client did not on r580 (default
//	                                     no); the switch plays a driver
//	                                     that would, on which a read-only
//	                                     pipe mount fails.

// StandInConfig configures a stand-in daemon.
type StandInConfig struct {
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
	StandInEnvCSVSpelling = "TANGRAM_STANDIN_MPS_CSV_SPELLING"
	StandInEnvStdinEOF    = "TANGRAM_STANDIN_MPS_STDIN_EOF"
	StandInEnvHang        = "TANGRAM_STANDIN_MPS_HANG"
	// The view of a stand-in client (`standin client`), see above.
	StandInEnvClientShm        = "TANGRAM_STANDIN_MPS_CLIENT_SHM"
	StandInEnvClientUID        = "TANGRAM_STANDIN_MPS_CLIENT_UID"
	StandInEnvClientHold       = "TANGRAM_STANDIN_MPS_CLIENT_HOLD"
	StandInEnvClientPipeRO     = "TANGRAM_STANDIN_MPS_CLIENT_PIPE_RO"
	StandInEnvClientWritesPipe = "TANGRAM_STANDIN_MPS_CLIENT_WRITES_PIPE"
	standInClientCommand       = "standin client"
	// StandInHangFile, in the log directory, lists commands that hang.
	StandInHangFile = "standin-hang"
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

// standInRequest is one command from the stand-in client.
type standInRequest struct {
	Transport string   `json:"transport"`
	Args      []string `json:"args"`
}

type standInReply struct {
	Out string `json:"out,omitempty"`
	Err string `json:"err,omitempty"`
}

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
	d := newStandInState(cfg)
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
func (d *standInState) serve(ctx context.Context, conn net.Conn) bool {
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	if len(strings.TrimSpace(string(line))) == 0 {
		_ = err // EOF before a command: a probe
		return false
	}
	var req standInRequest
	if err := json.Unmarshal(line, &req); err != nil || len(req.Args) == 0 {
		_ = json.NewEncoder(conn).Encode(standInReply{Err: fmt.Sprintf("malformed request %q", strings.TrimSpace(string(line)))})
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
	reply := standInReply{Out: out}
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
func (d *standInState) serveClient(ctx context.Context, conn net.Conn, r *bufio.Reader, args []string) {
	reply := func(rep standInReply) {
		if rep.Err != "" {
			d.log(standInRejectMark[1:] + rep.Err)
		}
		_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_ = json.NewEncoder(conn).Encode(rep)
	}
	if d.cfg.Protocol == 3 {
		// rule: v3-client-namespace.
		reply(standInReply{Err: "MPS v3: a client connects through its namespace's pipe directory (namespace get <ns> pipe-directory), not the control daemon's"})
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
		reply(standInReply{Err: fmt.Sprintf("malformed client request %q: want client --uid=<uid>", strings.Join(args, " "))})
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
		reply(standInReply{Err: err.Error()})
		return
	}
	reply(standInReply{Out: fmt.Sprintf("MPS server %d of user %d\n", s.pid, s.uid)})
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
func (d *standInState) admitClient(ctx context.Context, uid int, gone <-chan struct{}) (*classicServer, error) {
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
func (d *standInState) hangs(args []string) bool {
	list := d.cfg.Hang
	if d.cfg.LogDir != "" {
		if data, err := os.ReadFile(filepath.Join(d.cfg.LogDir, StandInHangFile)); err == nil {
			list = append(append([]string(nil), list...), ParseStandInHang(string(data))...)
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

// ParseStandInHang reads the hang switch's form: commands separated by
// commas or new lines.
func ParseStandInHang(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (d *standInState) log(msg string) {
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

// StandInLogEntry is one command in the stand-in's control.log.
type StandInLogEntry struct {
	// Transport is how it was given: "argv" (command-line arguments, the
	// MPS v3 form), "stdin" (the legacy shell) or "flag" (-q).
	Transport string
	// Command is its words joined by spaces; -q is logged as quit.
	Command string
	// Rejected is the daemon's error, "" when it was accepted.
	Rejected string
}

// StandInLog returns the commands control.log in logDir recorded, in order.
func StandInLog(logDir string) ([]StandInLogEntry, error) {
	data, err := os.ReadFile(filepath.Join(logDir, standInControlLog))
	if err != nil {
		return nil, fmt.Errorf("reading the stand-in MPS daemon's log: %w", err)
	}
	var out []StandInLogEntry
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, standInCommandMark); ok {
			transport, cmd, _ := strings.Cut(rest, "]: ")
			out = append(out, StandInLogEntry{Transport: transport, Command: cmd})
		} else if _, why, ok := strings.Cut(line, standInRejectMark); ok && len(out) > 0 {
			out[len(out)-1].Rejected = why
		}
	}
	return out, nil
}

// StandInCommands returns the commands (accepted or not) control.log in
// logDir recorded, in order.
func StandInCommands(logDir string) ([]string, error) {
	entries, err := StandInLog(logDir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Command)
	}
	return out, nil
}

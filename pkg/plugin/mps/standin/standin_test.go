package standin

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpstest"
)

// standInDaemon is a stand-in daemon run in the test process; shm stands
// for its /dev/shm (a classic daemon runs with a /dev/shm of its own).
type standInDaemon struct {
	pipe, logDir, shm string
	done              chan error
}

// startStandIn runs RunDaemon with cfg (its pipe and log
// directories filled in) until the test ends.
func startStandIn(t *testing.T, cfg Config) *standInDaemon {
	t.Helper()
	root := mpstest.ShortRoot(t)
	d := &standInDaemon{pipe: filepath.Join(root, "pipe"), logDir: filepath.Join(root, "log"), shm: filepath.Join(root, "shm"), done: make(chan error, 1)}
	for _, dir := range []string{d.logDir, d.shm} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg.PipeDir, cfg.LogDir = d.pipe, d.logDir
	ctx, cancel := context.WithCancel(context.Background())
	go func() { d.done <- RunDaemon(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-d.done; err != nil {
			t.Error(err)
		}
	})
	mpstest.WaitAnswering(t, func(ctx context.Context) error { return Probe(ctx, d.pipe) })
	return d
}

// cli runs the stand-in program in this process as a client of d, with
// the given standard input and arguments.
func (d *standInDaemon) cli(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := Runner{}.Run(ctx, append([]string{control.BinaryName}, args...), []string{"CUDA_MPS_PIPE_DIRECTORY=" + d.pipe}, stdin)
	return string(out), err
}

// client runs `standin client`, a CUDA program starting under MPS, whose
// view is pipe (its CUDA_MPS_PIPE_DIRECTORY), shm (its /dev/shm) and env.
func (d *standInDaemon) client(pipe, shm string, env ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := Runner{}.Run(ctx, []string{control.BinaryName, "standin", "client"},
		append([]string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe, EnvClientShm + "=" + shm}, env...), "")
	return string(out), err
}

// heldClient starts `standin client` as user uid with the daemon's pipe
// directory and a /dev/shm of its own, holding its context until release
// is called; the client's exit status and output arrive on the channel.
func (d *standInDaemon) heldClient(t *testing.T, uid int) (release func(), result <-chan clientResult) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	vars := map[string]string{"CUDA_MPS_PIPE_DIRECTORY": d.pipe, EnvClientShm: t.TempDir(),
		EnvClientUID: fmt.Sprint(uid), EnvClientHold: "stdin"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	res := make(chan clientResult, 1)
	go func() {
		var out strings.Builder
		code := Run(ctx, Invocation{Args: []string{"standin", "client"}, Getenv: func(k string) string { return vars[k] },
			Stdin: stdinR, Stdout: &out, Stderr: &out})
		res <- clientResult{code: code, out: out.String()}
	}()
	var once sync.Once
	release = func() { once.Do(func() { _ = stdinW.Close() }) }
	t.Cleanup(func() { release(); cancel() })
	return release, res
}

type clientResult struct {
	code int
	out  string
}

// waitLog waits until the daemon's control.log holds substr.
func (d *standInDaemon) waitLog(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(d.logDir, standInControlLog))
		if strings.Contains(string(data), substr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("control.log never said %q:\n%s", substr, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clientAs runs `standin client` as user uid with the daemon's pipe
// directory and /dev/shm; it leaves at once once served.
func (d *standInDaemon) clientAs(uid int) (string, error) {
	return d.client(d.pipe, d.shm, fmt.Sprintf("%s=%d", EnvClientUID, uid))
}

// v3 runs one MPS v3 command as arguments.
func (d *standInDaemon) v3(args ...string) (string, error) {
	return d.cli("", append([]string{"-p", "3"}, args...)...)
}

// runForegroundStandIn runs "nvidia-cuda-mps-control <args>" (a daemon
// start) in this process with the given stdin and environment; the exit
// status arrives on the channel.
func runForegroundStandIn(t *testing.T, stdin io.Reader, env map[string]string, args ...string) (string, <-chan int) {
	t.Helper()
	root := mpstest.ShortRoot(t)
	pipe := filepath.Join(root, "pipe")
	vars := map[string]string{"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": filepath.Join(root, "log")}
	for k, v := range env {
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	code, done := make(chan int, 1), make(chan struct{})
	go func() {
		defer close(done)
		code <- Run(ctx, Invocation{Args: args, Getenv: func(k string) string { return vars[k] },
			Stdin: stdin, Stdout: io.Discard, Stderr: io.Discard})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the stand-in daemon did not stop")
		}
	})
	return pipe, code
}

func wantErr(t *testing.T, what string, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Errorf("%s: error %v, want one containing %q", what, err, substr)
	}
}

func wantOK(t *testing.T, what string, out string, err error, want string) {
	t.Helper()
	if err != nil || (want != "*" && out != want) {
		t.Errorf("%s: %q, %v; want %q", what, out, err, want)
	}
}

// TestStandInRules lists each documented behaviour of the real
// nvidia-cuda-mps-control the stand-in follows, with its source (the pages
// and projects /work/shared/notes/NVIDIA-FACTS.md names, summarised in
// docs/nvml.md), and checks that the stand-in enforces it: a stand-in that
// accepts what the real tool refuses would prove nothing.
func TestStandInRules(t *testing.T) {
	const (
		v3Page   = "NVIDIA, MPS v3 Interface (docs.nvidia.com/deploy/mps, r615/r620)"
		nsPage   = "NVIDIA, MPS v3 Namespaces (Namespace Routing)"
		kai      = "NVIDIA KAI scheduler, kai-gpu-fractioning mpsctl (verified on driver 615)"
		legacy   = "NVIDIA, MPS documentation / nvidia-cuda-mps-control(1), legacy shell"
		pipeEnv  = "NVIDIA, MPS documentation, CUDA_MPS_PIPE_DIRECTORY (Appendix: Environment Variables): control daemon, server and clients communicate through named pipes and UNIX sockets there; the value must be the same for the daemon and all its clients"
		dynamo   = "NVIDIA Dynamo, per-GPU compute and memory limits with MPS (615.71.09)"
		manPage  = "NVIDIA, nvidia-cuda-mps-control(1), DESCRIPTION (a server runs as its first client's UID; a client of another UID is queued until the server's clients are done)"
		gpuRun   = "GPU run on an H200, driver 580.159.04 (docs/gpu-reports/2026-11-27-h200-r580-experiments.md)"
		v3Server = "s"
		// factsRound2 is shared/notes/NVIDIA-FACTS.md, "Round two" (NVIDIA's
		// r620 MPS pages and the r615 code of NVIDIA's GPU-fractioning
		// project).
		factsRound2 = "NVIDIA-FACTS.md, Round two (NVIDIA MPS v3 pages, r620; NVIDIA GPU-fractioning code, r615)"
	)
	// v3 is a multi-user MPS v3 daemon with server s and namespace ns.
	v3 := func(t *testing.T, cfg Config) *standInDaemon {
		cfg.Protocol, cfg.MultiUser = 3, true
		d := startStandIn(t, cfg)
		for _, cmd := range [][]string{
			{"server", "create", v3Server, "--uid=0", "--allowed-devices=GPU-a,GPU-b"},
			{"namespace", "create", "ns", "--server=" + v3Server},
			{"namespace", "set", "ns", "--server=" + v3Server, "--active-thread-percentage=30", "--pinned-memory-limit=20480M"},
		} {
			if _, err := d.v3(cmd...); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	rules := []struct {
		rule, source string
		check        func(t *testing.T)
	}{
		{rule: "v3-no-stdin: MPS v3 takes commands as arguments; a command on stdin (the legacy shell) is refused", source: v3Page + "; " + kai,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				_, err := d.cli("server list --format=csv\n")
				wantErr(t, "server list on stdin", err, "no interactive shell")
				out, err := d.cli("", "-p", "3", "server", "list", "--format=csv")
				wantOK(t, "server list as arguments", out, err, "*")
			}},
		{rule: "v3-quit-q: MPS v3 quits with -q; quit on stdin is refused", source: v3Page,
			check: func(t *testing.T) {
				d := startStandIn(t, Config{Protocol: 3})
				_, err := d.cli("quit\n")
				wantErr(t, "quit on stdin", err, "no interactive shell")
				if _, err := d.cli("", "-q"); err != nil {
					t.Fatal(err)
				}
				waitStopped(t, d)
			}},
		{rule: "v2-stdin: legacy MPS reads commands on stdin; <module> <verb> arguments need -p 3", source: legacy + "; " + v3Page,
			check: func(t *testing.T) {
				d := startStandIn(t, Config{Protocol: 2})
				out, err := d.cli("get_server_list\n")
				wantOK(t, "get_server_list on stdin", out, err, "")
				_, err = d.cli("", "server", "list")
				wantErr(t, "server list as arguments", err, "need a daemon started with -p 3")
			}},
		{rule: "client-follows-daemon: a client follows the running daemon's protocol, whatever its own -p", source: v3Page,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				out, err := d.cli("", "-p", "2", "namespace", "get", "ns", v3Server, "name")
				wantOK(t, "a -p 2 client of a v3 daemon", out, err, "ns\n")
			}},
		{rule: "v3-no-M: -M (legacy multi-user) with protocol 3 is refused; v3 takes -m/--multiuser", source: v3Page + "; " + kai + " (runs -p 3 -m -f)",
			check: func(t *testing.T) {
				for _, start := range []struct {
					env  map[string]string
					args []string
				}{
					{args: []string{"-p", "3", "-M", "-f"}},
					{env: map[string]string{"CUDA_MPS_PROTOCOL_VERSION": "3"}, args: []string{"-f", "-M"}},
				} {
					_, code := runForegroundStandIn(t, blockingReader(t), start.env, start.args...)
					select {
					case c := <-code:
						if c != 2 {
							t.Errorf("%v: exit %d, want 2", start.args, c)
						}
					case <-time.After(5 * time.Second):
						t.Errorf("%v %v: the daemon started", start.env, start.args)
					}
				}
				pipe, code := runForegroundStandIn(t, blockingReader(t), nil, "-p", "3", "-m", "-f")
				waitRunning(t, pipe, code)
				pipe, code = runForegroundStandIn(t, blockingReader(t), nil, "-f", "-M")
				waitRunning(t, pipe, code)
			}},
		{rule: "env-wins: CUDA_MPS_PROTOCOL_VERSION wins over -p", source: v3Page,
			check: func(t *testing.T) {
				pipe, code := runForegroundStandIn(t, blockingReader(t), map[string]string{"CUDA_MPS_PROTOCOL_VERSION": "3"}, "-p", "2", "-f")
				waitRunning(t, pipe, code)
				d := &standInDaemon{pipe: pipe}
				_, err := d.cli("get_server_list\n")
				wantErr(t, "a legacy command", err, "no interactive shell")
			}},
		{rule: "fg-stdin-eof: a -f daemon exits when its stdin ends (unconfirmed for r620: switch " + EnvStdinEOF + "=ignore)", source: kai + " (r615 report)",
			check: func(t *testing.T) {
				r, w := io.Pipe()
				pipe, code := runForegroundStandIn(t, r, nil, "-p", "3", "-m", "-f")
				waitRunning(t, pipe, code)
				_ = w.Close()
				select {
				case c := <-code:
					if c != 0 {
						t.Errorf("exit %d at stdin EOF, want 0", c)
					}
				case <-time.After(5 * time.Second):
					t.Error("the -f daemon still runs after its stdin ended")
				}
				r, w = io.Pipe()
				pipe, code = runForegroundStandIn(t, r, map[string]string{EnvStdinEOF: "ignore"}, "-p", "3", "-m", "-f")
				waitRunning(t, pipe, code)
				_ = w.Close()
				select {
				case c := <-code:
					t.Errorf("with %s=ignore the daemon exited (%d) at stdin EOF", EnvStdinEOF, c)
				case <-time.After(200 * time.Millisecond):
				}
			}},
		{rule: "ns-name: namespace names are ^[a-z0-9_]{1,64}$", source: kai + "; " + nsPage,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				for _, bad := range []string{"tangram-0b7c3a8e-1f2d", "Upper", "dot.ted", strings.Repeat("a", 65), "../x"} {
					_, err := d.v3("namespace", "create", bad, "--server="+v3Server)
					wantErr(t, "namespace create "+bad, err, "invalid namespace name")
				}
				_, err := d.v3("namespace", "create", strings.Repeat("a", 64), "--server="+v3Server)
				wantOK(t, "a 64-character name", "", err, "")
				_, err = d.v3("namespace", "create", "tangram_0b7c3a8e_1f2d_4e5a_9b6c_7d8e9f0a1b2c", "--server="+v3Server)
				wantOK(t, "tangram_ and a claim UID with underscores", "", err, "")
			}},
		{rule: "set-with-clients: namespace set fails while a client is attached", source: kai + " (r615)",
			check: func(t *testing.T) {
				d := v3(t, Config{})
				pid, err := d.v3("standin", "attach-client", "ns", "--server="+v3Server)
				if err != nil {
					t.Fatal(err)
				}
				_, err = d.v3("namespace", "set", "ns", "--server="+v3Server, "--active-thread-percentage=30")
				wantErr(t, "set with a client", err, "attached client")
				if _, err := d.v3("client", "terminate", strings.TrimSpace(pid)); err != nil {
					t.Fatal(err)
				}
				_, err = d.v3("namespace", "set", "ns", "--server="+v3Server, "--active-thread-percentage=40")
				wantOK(t, "set after client terminate", "", err, "")
			}},
		{rule: "delete-with-clients: namespace delete fails while a client is attached, unless the clients were terminated or it is --force'd", source: kai + " (r615)",
			check: func(t *testing.T) {
				d := v3(t, Config{})
				if _, err := d.v3("standin", "attach-client", "ns", "--server="+v3Server, "--pid=4242"); err != nil {
					t.Fatal(err)
				}
				_, err := d.v3("namespace", "delete", "ns", "--server="+v3Server)
				wantErr(t, "delete with a client", err, "delete with --force")
				_, err = d.v3("namespace", "delete", "ns", "--server="+v3Server, "--force")
				wantOK(t, "delete --force", "", err, "")
				if _, err := os.Stat(filepath.Join(d.pipe, v3Server, "ns")); !os.IsNotExist(err) {
					t.Errorf("the namespace's pipe directory is still there: %v", err)
				}
			}},
		{rule: "server-ready, server-list-columns: server list --format=csv: columns name, uid, pid, status, pipe-directory; status Ready", source: v3Page + "; " + dynamo,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				out, err := d.v3("server", "list", "--format=csv")
				want := "name,uid,pid,status,pipe-directory,allowed-devices\ns,0,300001,Ready," + filepath.Join(d.pipe, v3Server) + ",\"GPU-a,GPU-b\"\n"
				wantOK(t, "server list", out, err, want)
			}},
		{rule: "ns-list-columns: namespace list --format=csv spells columns with hyphens (underscores: unconfirmed, switch " + EnvCSVSpelling + "=underscore); values like 30.00 and 20G", source: v3Page + "; " + kai + " (reads pipe_directory)",
			check: func(t *testing.T) {
				for _, underscore := range []bool{false, true} {
					d := v3(t, Config{UnderscoreColumns: underscore})
					out, err := d.v3("namespace", "list", "--server="+v3Server, "--format=csv")
					header := "name,server,active-thread-percentage,pinned-memory-limit,client-priority,pipe-directory"
					if underscore {
						header = strings.ReplaceAll(header, "-", "_")
					}
					wantOK(t, "namespace list", out, err, header+"\nns,s,30.00,20G,,"+filepath.Join(d.pipe, v3Server, "ns")+"\n")
				}
			}},
		{rule: "table-form: the table form prints upper-case headers with spaces (ACTIVE THREAD PERCENTAGE)", source: v3Page,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				out, err := d.v3("namespace", "list", "--server="+v3Server)
				if err != nil || !strings.Contains(out, "ACTIVE THREAD PERCENTAGE") {
					t.Errorf("table form %q, %v", out, err)
				}
			}},
		{rule: "ns-get-form, ns-get-pipe: namespace get <ns> <server> <field> (server positional, field required) answers where clients reach the namespace; the field is spelled pipe-directory as the page does (pipe_directory as r615 code reads it: unconfirmed, switch " + EnvCSVSpelling + "=underscore)", source: factsRound2 + "; " + kai + "; " + nsPage,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				want := filepath.Join(d.pipe, v3Server, "ns") + "\n"
				out, err := d.v3("namespace", "get", "ns", v3Server, "pipe-directory")
				wantOK(t, "the documented form", out, err, want)
				if fi, err := os.Stat(strings.TrimSpace(want)); err != nil || !fi.IsDir() {
					t.Errorf("the namespace's pipe directory: %v", err)
				}
				_, err = d.v3("namespace", "get", "ns", v3Server, "pipe_directory")
				wantErr(t, "the other spelling", err, "unknown field")
				_, err = d.v3("namespace", "get", "ns", "--server="+v3Server, "pipe-directory")
				wantErr(t, "the server as an option", err, "unknown option --server")
				_, err = d.v3("namespace", "get", "ns", v3Server)
				wantErr(t, "no field", err, "usage: namespace get <name> <server> <field>")
				u := v3(t, Config{UnderscoreColumns: true})
				out, err = u.v3("namespace", "get", "ns", v3Server, "pipe_directory")
				wantOK(t, "the r615 code's spelling, switched", out, err, filepath.Join(u.pipe, v3Server, "ns")+"\n")
				_, err = u.v3("namespace", "get", "ns", v3Server, "pipe-directory")
				wantErr(t, "the page's spelling, switched off", err, "unknown field")
			}},
		{rule: "ns-list-unset: namespace list shows an unset memory limit as unlimited and an unset percentage as 100.00", source: factsRound2,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				if _, err := d.v3("namespace", "create", "bare", "--server="+v3Server); err != nil {
					t.Fatal(err)
				}
				out, err := d.v3("namespace", "list", "--server="+v3Server, "--format=csv")
				if err != nil || !strings.Contains(out, "\nbare,s,100.00,unlimited,,") {
					t.Errorf("namespace list %q, %v; want the bare namespace as 100.00,unlimited", out, err)
				}
			}},
		{rule: "client-list: client list --format=csv,noheader lists the clients without a header, each row pid,server,<device UUID>,<server>/<namespace> (<context>),<command>", source: factsRound2 + " (r615 capture); " + kai,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				if _, err := d.v3("standin", "attach-client", "ns", "--server="+v3Server, "--pid=1234567"); err != nil {
					t.Fatal(err)
				}
				if _, err := d.v3("standin", "attach-client", "ns", "--server="+v3Server, "--pid=42", "--device=GPU-b", "--command=VLLM::EngineCore"); err != nil {
					t.Fatal(err)
				}
				out, err := d.v3("client", "list", "--server="+v3Server, "--format=csv,noheader")
				wantOK(t, "client list", out, err, "42,s,GPU-b,s/ns (0),VLLM::EngineCore\n1234567,s,GPU-a,s/ns (0),standin-client\n")
			}},
		{rule: "client-terminate-pid: client terminate takes the PID alone, no options", source: factsRound2 + "; " + v3Page,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				if _, err := d.v3("standin", "attach-client", "ns", "--server="+v3Server, "--pid=77"); err != nil {
					t.Fatal(err)
				}
				_, err := d.v3("client", "terminate", "77", "--server="+v3Server)
				wantErr(t, "terminate with --server", err, "unknown option --server")
				out, err := d.v3("client", "terminate", "77")
				wantOK(t, "terminate <pid>", out, err, "")
				out, err = d.v3("client", "list", "--format=csv,noheader")
				wantOK(t, "no client left", out, err, "")
			}},
		{rule: "socket-path: every namespace endpoint <pipe>/<server>/<namespace>/control is a Unix socket; a path over 107 bytes cannot be bound", source: factsRound2 + "; unix(7) (sun_path is 108 bytes with the NUL)",
			check: func(t *testing.T) {
				// A pipe directory long enough that a namespace name of
				// 40 characters makes the endpoint exactly 107 bytes.
				root := mpstest.ShortRoot(t)
				pipe := filepath.Join(root, "p")
				pipe += strings.Repeat("x", maxSocketPath-len(filepath.Join(pipe, v3Server, strings.Repeat("a", 40), "control")))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- RunDaemon(ctx, Config{PipeDir: pipe, Protocol: 3, MultiUser: true}) }()
				t.Cleanup(func() { cancel(); <-done })
				mpstest.WaitAnswering(t, func(ctx context.Context) error { return Probe(ctx, pipe) })
				d := &standInDaemon{pipe: pipe}
				if _, err := d.v3("server", "create", v3Server, "--uid=0"); err != nil {
					t.Fatal(err)
				}
				fits := strings.Repeat("a", 40)
				_, err := d.v3("namespace", "create", fits, "--server="+v3Server)
				wantOK(t, "a namespace whose socket is exactly 107 bytes", "", err, "")
				_, err = d.v3("namespace", "create", fits+"b", "--server="+v3Server)
				wantErr(t, "one byte longer", err, "over the 107")
			}},
		{rule: "stale-socket: a daemon cannot start over the control socket of one that did not stop cleanly (nor over a running one's); a clean stop leaves neither socket nor PID file", source: factsRound2 + " (r615 code: a v3 daemon over a stale socket fails to bind)",
			check: func(t *testing.T) {
				root := mpstest.ShortRoot(t)
				pipe := filepath.Join(root, "pipe")
				if err := LeaveCrashedDaemon(pipe); err != nil {
					t.Fatal(err)
				}
				err := RunDaemon(context.Background(), Config{PipeDir: pipe, Protocol: 3})
				wantErr(t, "a start over a crashed daemon's socket", err, "address already in use")
				d := startStandIn(t, Config{Protocol: 3})
				err = RunDaemon(context.Background(), Config{PipeDir: d.pipe, Protocol: 3})
				wantErr(t, "a start over a running daemon's socket", err, "address already in use")
				if _, err := os.Stat(filepath.Join(d.pipe, pidFileName)); err != nil {
					t.Errorf("the running daemon's PID file: %v", err)
				}
				if _, err := d.cli("", "-q"); err != nil {
					t.Fatal(err)
				}
				waitStopped(t, d)
				if entries, _ := os.ReadDir(d.pipe); len(entries) != 0 {
					t.Errorf("the pipe directory holds %v after a clean stop, want nothing", entries)
				}
			}},
		{rule: "pre615-options: the binary of a driver before r615 takes -d -f -h -v -S -M only: no -p, -m, -q, -a, no command as arguments; CUDA_MPS_PROTOCOL_VERSION starts no v3 daemon; its commands go through the control shell", source: factsRound2 + " (the binary before r615)",
			check: func(t *testing.T) {
				const r580 = "580.159.04"
				run := func(env map[string]string, stdin string, args ...string) (int, string) {
					var out strings.Builder
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					code := Run(ctx, Invocation{DriverVersion: r580, Args: args, Getenv: func(k string) string { return env[k] },
						Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &out})
					return code, out.String()
				}
				for _, args := range [][]string{{"-p", "3", "-f"}, {"-m", "-f"}, {"-q"}, {"-a", "x"}, {"server", "list"}, {"-p", "3", "namespace", "list"}} {
					if code, out := run(nil, "", args...); code != 2 {
						t.Errorf("driver %s, %v: exit %d (%q), want 2", r580, args, code, out)
					}
				}
				if code, out := run(nil, "", "-v"); code != 0 || out != r580+"\n" {
					t.Errorf("-v: %d %q", code, out)
				}
				// A -M daemon started with CUDA_MPS_PROTOCOL_VERSION=3 is
				// classic: it takes commands on stdin and none as arguments.
				root := mpstest.ShortRoot(t)
				pipe := filepath.Join(root, "pipe")
				env := map[string]string{"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": filepath.Join(root, "log"), "CUDA_MPS_PROTOCOL_VERSION": "3"}
				ctx, cancel := context.WithCancel(context.Background())
				code := make(chan int, 1)
				go func() {
					code <- Run(ctx, Invocation{DriverVersion: r580, Args: []string{"-f", "-M"}, Getenv: func(k string) string { return env[k] },
						Stdin: blockingReader(t), Stdout: io.Discard, Stderr: io.Discard})
				}()
				t.Cleanup(func() { cancel(); <-code })
				waitRunning(t, pipe, code)
				if c, out := run(env, "get_server_list\n"); c != 0 {
					t.Errorf("get_server_list on stdin: %d %q", c, out)
				}
				d := &standInDaemon{pipe: pipe}
				_, err := d.cli("", "-p", "3", "server", "list")
				wantErr(t, "a v3 command to the r580 daemon (by a client of no particular release)", err, "need a daemon started with -p 3")
			}},
		{rule: "multiuser-uid0: servers of a multi-user daemon take UID 0", source: v3Page + " (server create --uid=0 for multi-user servers)",
			check: func(t *testing.T) {
				d := v3(t, Config{})
				_, err := d.v3("server", "create", "other", "--uid=1000")
				wantErr(t, "a non-zero UID", err, "run as UID 0")
			}},
		{rule: "classic-client-pipe: a classic client reaches the control daemon only through the daemon's own pipe directory, not another (e.g. a per-claim empty one)", source: pipeEnv,
			check: func(t *testing.T) {
				d := startStandIn(t, Config{Protocol: 2})
				out, err := d.client(d.pipe, d.shm)
				wantOK(t, "a client of the daemon's pipe directory", out, err, "*")
				_, err = d.client(t.TempDir(), d.shm)
				wantErr(t, "a client of another directory", err, "cannot find MPS control daemon")
			}},
		{rule: "classic-client-shm: a classic client needs nothing of the MPS server's /dev/shm: with a /dev/shm of its own it is served, and it creates no file in either", source: gpuRun + " (section 2: clients with a fresh tmpfs, another directory or the host's /dev/shm were served and limited; none created a file)",
			check: func(t *testing.T) {
				d := startStandIn(t, Config{Protocol: 2})
				own := t.TempDir()
				out, err := d.client(d.pipe, own)
				wantOK(t, "a client with a /dev/shm of its own", out, err, "*")
				out, err = d.client(d.pipe, d.shm)
				wantOK(t, "a client with the daemon's /dev/shm", out, err, "*")
				for _, dir := range []string{own, d.shm} {
					if entries, _ := os.ReadDir(dir); len(entries) != 0 {
						t.Errorf("%s holds %v after the clients, want nothing", dir, entries)
					}
				}
			}},
		{rule: "classic-client-users: without -M a server serves the UID it was started for; a client of another UID waits until that server's clients are all done, then gets a server of its own UID; with -M one server serves every UID at once", source: manPage + "; " + gpuRun + " (section 3: a uid 1000 client waited 13 s for a root client without -M, 0.2 s with -M)",
			check: func(t *testing.T) {
				d := startStandIn(t, Config{Protocol: 2})
				releaseRoot, root := d.heldClient(t, 0)
				d.waitLog(t, "Starting new server 200001 for user 0")
				releaseUser, user := d.heldClient(t, 1000)
				d.waitLog(t, "Client of user 1000 queued")
				select {
				case r := <-user:
					t.Fatalf("the uid 1000 client was answered while the root client holds the server: %+v", r)
				default:
				}
				releaseRoot()
				if r := <-root; r.code != 0 {
					t.Fatalf("the root client: %+v", r)
				}
				releaseUser()
				if r := <-user; r.code != 0 || !strings.Contains(r.out, "of user 1000") {
					t.Errorf("the uid 1000 client after the root client left: %+v, want a server of user 1000", r)
				}

				multi := startStandIn(t, Config{Protocol: 2, MultiUser: true})
				releaseRoot, root = multi.heldClient(t, 0)
				multi.waitLog(t, "Starting new server")
				// Answered while the root client still holds the server.
				out, err := multi.clientAs(1000)
				wantOK(t, "a uid 1000 client of a -M daemon", out, err, "connected to MPS server 200001 of user 0\n")
				releaseRoot()
				if r := <-root; r.code != 0 {
					t.Errorf("the root client: %+v", r)
				}
			}},
		{rule: "classic-client-pipe-ro: a classic client connects in the pipe directory (a read-only mount allows it) and creates nothing there (switch " + EnvClientWritesPipe + "=1 plays a driver whose client would, on which a read-only mount fails)", source: pipeEnv + "; " + gpuRun + " (section 2: clients through a read-only bind were served; no file appeared)",
			check: func(t *testing.T) {
				d := startStandIn(t, Config{Protocol: 2})
				out, err := d.client(d.pipe, d.shm, EnvClientPipeRO+"=1")
				wantOK(t, "a read-only pipe directory", out, err, "*")
				_, err = d.client(d.pipe, d.shm, EnvClientPipeRO+"=1", EnvClientWritesPipe+"=1")
				wantErr(t, "a client that writes, on a read-only pipe directory", err, "read-only file system")
				out, err = d.client(d.pipe, d.shm, EnvClientWritesPipe+"=1")
				wantOK(t, "a client that writes, on a writable pipe directory", out, err, "*")
				if entries, _ := os.ReadDir(d.pipe); len(entries) != 2 {
					t.Errorf("the pipe directory holds %v after the clients, want only the control socket and the daemon's PID file", entries)
				}
			}},
		{rule: "v3-client-namespace: under MPS v3 a client connects through its namespace's pipe directory, not the control socket", source: nsPage + "; " + dynamo,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				_, err := d.client(d.pipe, d.shm)
				wantErr(t, "a client on a v3 daemon's control socket", err, "namespace's pipe directory")
			}},
		{rule: "v3-size-unit: a v3 memory size names its unit", source: v3Page + " (e.g. --pinned-memory-limit=20G)",
			check: func(t *testing.T) {
				d := v3(t, Config{})
				_, err := d.v3("namespace", "set", "ns", "--server="+v3Server, "--pinned-memory-limit=20480")
				wantErr(t, "a bare number", err, "not a memory size with a unit")
			}},
	}
	for _, r := range rules {
		t.Run(r.rule, func(t *testing.T) {
			t.Logf("source: %s", r.source)
			r.check(t)
		})
	}
}

// blockingReader is a stdin that never ends during the test.
func blockingReader(t *testing.T) io.Reader {
	r, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	return r
}

func waitRunning(t *testing.T, pipe string, code <-chan int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for Probe(context.Background(), pipe) != nil {
		select {
		case c := <-code:
			t.Fatalf("the daemon exited (%d) at start", c)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in daemon does not answer")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitStopped(t *testing.T, d *standInDaemon) {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Error("the daemon still runs after quit")
	}
}

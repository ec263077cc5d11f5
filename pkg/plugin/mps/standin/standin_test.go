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
				if _, err := d.v3("client", "terminate", strings.TrimSpace(pid), "--server="+v3Server); err != nil {
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
		{rule: "ns-get-pipe: namespace get <ns> <server> pipe_directory answers where clients reach the namespace", source: kai + "; " + nsPage,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				want := filepath.Join(d.pipe, v3Server, "ns") + "\n"
				out, err := d.v3("namespace", "get", "ns", v3Server, "pipe_directory")
				wantOK(t, "KAI's form", out, err, want)
				out, err = d.v3("namespace", "get", "ns", "--server="+v3Server, "pipe-directory")
				wantOK(t, "the option form", out, err, want)
				if fi, err := os.Stat(strings.TrimSpace(want)); err != nil || !fi.IsDir() {
					t.Errorf("the namespace's pipe directory: %v", err)
				}
			}},
		{rule: "client-list: client list --format=csv,noheader lists the clients without a header", source: kai,
			check: func(t *testing.T) {
				d := v3(t, Config{})
				if _, err := d.v3("standin", "attach-client", "ns", "--server="+v3Server, "--pid=1234567"); err != nil {
					t.Fatal(err)
				}
				out, err := d.v3("client", "list", "--server="+v3Server, "--format=csv,noheader")
				wantOK(t, "client list", out, err, "1234567,s,ns\n")
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
				if entries, _ := os.ReadDir(d.pipe); len(entries) != 1 {
					t.Errorf("the pipe directory holds %v after the clients, want only the control socket", entries)
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

package daemon

// ProcessDaemon: the node's MPS control daemon as a child process of the
// plugin (--mps-daemon=process), supervised and restarted.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
)

// ProcessDaemonConfig configures the real (exec-based) daemon.
type ProcessDaemonConfig struct {
	Layout Layout
	// Binary is the nvidia-cuda-mps-control executable.
	Binary string
	// Wrapper, when set, is put before "<Binary> -f" to start the daemon,
	// e.g. a command that gives it a private /dev/shm.
	Wrapper []string
	// Env is added to the daemon's and its clients' environment, e.g. the
	// driver root's PATH and LD_LIBRARY_PATH (driverroot.Root.ToolEnv), so
	// the driver's binary runs with the driver's own libraries.
	Env []string
	// VisibleDevices are the UUIDs of the node's shareable cards; the daemon
	// and its server see exactly these.
	VisibleDevices []string
	// MultiUser starts the daemon in multi-user mode, so that clients of
	// different UIDs share one server: -m in MPS v3, the legacy -M
	// otherwise. Without it the daemon runs one server per UID at a time,
	// and pods running as different users wait for each other.
	MultiUser bool
	// Protocol 3 starts the daemon as MPS v3 (-p 3, and
	// CUDA_MPS_PROTOCOL_VERSION, which NVIDIA documents as winning over
	// -p); 0 or 2 is legacy MPS.
	Protocol  int
	Commander control.Commander
	// ControlTimeout bounds each control command (control.DefaultTimeout).
	ControlTimeout time.Duration
	// ReadyTimeout bounds how long a start waits for the daemon to answer.
	ReadyTimeout time.Duration
	// MinBackoff and MaxBackoff bound the delay between restarts.
	MinBackoff, MaxBackoff time.Duration
	// ProbeInterval is how often a daemon adopted from a previous plugin
	// process (not our child, so we cannot wait for it) is checked.
	ProbeInterval time.Duration
	// StopTimeout is how long Stop waits after "quit" before killing.
	StopTimeout time.Duration
}

// ProcessDaemon runs nvidia-cuda-mps-control in the foreground (-f) as a child
// process, its standard input held open for its life (a -f daemon exits at
// end of input), and restarts it with backoff when it dies.
type ProcessDaemon struct {
	cfg ProcessDaemonConfig

	mu sync.Mutex
	// cancel and done belong to the running supervisor; nil when none runs.
	cancel func()
	done   chan struct{}
	// quitting tells the supervisor that its cancellation is a Stop (wait
	// for the daemon to leave) rather than a Close (leave it running).
	quitting atomic.Bool
	// adopted is set while the supervised daemon is one a previous plugin
	// process left running: it is not our child, so only quit stops it.
	adopted atomic.Bool

	starts atomic.Int64
}

// NewProcessDaemon fills in defaults for unset durations.
func NewProcessDaemon(cfg ProcessDaemonConfig) *ProcessDaemon {
	if cfg.Commander == nil {
		cfg.Commander = control.ExecCommander{}
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 5 * time.Second
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	return &ProcessDaemon{cfg: cfg}
}

// Starts counts the daemon processes this ProcessDaemon has launched.
func (d *ProcessDaemon) Starts() int64 { return d.starts.Load() }

func (d *ProcessDaemon) env() []string {
	env := []string{
		"CUDA_VISIBLE_DEVICES=" + strings.Join(d.cfg.VisibleDevices, ","),
		"CUDA_MPS_PIPE_DIRECTORY=" + d.cfg.Layout.PipeDir(),
		"CUDA_MPS_LOG_DIRECTORY=" + d.cfg.Layout.LogDir(),
	}
	if d.cfg.Protocol == 3 {
		env = append(env, "CUDA_MPS_PROTOCOL_VERSION=3")
	}
	return append(env, d.cfg.Env...)
}

// client is the control binary as a client of this daemon, in its
// protocol.
func (d *ProcessDaemon) client() control.Client {
	return control.Client{Runner: d.cfg.Commander, Binary: d.cfg.Binary, PipeDir: d.cfg.Layout.PipeDir(),
		Protocol: d.cfg.Protocol, Env: d.env(), Timeout: d.cfg.ControlTimeout}
}

// Control sends one command to the running daemon and returns its answer;
// it is the control.Func of MPS v3 mode.
func (d *ProcessDaemon) Control(ctx context.Context, command []string) (string, error) {
	return d.client().Command(ctx, command)
}

// control sends one command to the running daemon.
func (d *ProcessDaemon) control(ctx context.Context, command ...string) error {
	_, err := d.client().Command(ctx, command)
	return err
}

// probe reports whether a daemon answers on the pipe directory.
func (d *ProcessDaemon) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ReadyTimeout)
	defer cancel()
	return d.client().Probe(ctx)
}

// quit asks the daemon to quit.
func (d *ProcessDaemon) quit(ctx context.Context) error {
	return d.client().Quit(ctx)
}

// Ensure starts the daemon when no supervisor runs. A daemon already
// answering (left by a previous plugin process) is adopted, not duplicated.
func (d *ProcessDaemon) Ensure(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		// The supervisor keeps it running; a dead daemon is being restarted.
		return nil
	}
	logger := klog.FromContext(ctx)
	if err := d.cfg.Layout.Create(); err != nil {
		return err
	}
	var proc control.Process
	if err := d.probe(ctx); err == nil {
		logger.Info("Adopting the MPS control daemon already running", "pipeDir", d.cfg.Layout.PipeDir())
	} else {
		p, err := d.start(ctx)
		if err != nil {
			return err
		}
		proc = p
	}
	supCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	d.done = make(chan struct{})
	d.quitting.Store(false)
	d.adopted.Store(proc == nil)
	go d.supervise(supCtx, proc, d.done)
	return nil
}

// start launches one daemon process and waits until it answers.
func (d *ProcessDaemon) start(ctx context.Context) (control.Process, error) {
	logger := klog.FromContext(ctx)
	// A daemon that died (killed, a node crash) leaves its socket, over
	// which a new one fails to bind.
	if _, err := control.RemoveStaleSocket(ctx, d.cfg.Layout.PipeDir()); err != nil {
		return nil, fmt.Errorf("starting MPS control daemon: %w", err)
	}
	argv := append(append(append([]string(nil), d.cfg.Wrapper...), d.cfg.Binary), control.DaemonArgs(d.cfg.Protocol, d.cfg.MultiUser)...)
	proc, err := d.cfg.Commander.Start(ctx, argv, d.env())
	if err != nil {
		return nil, fmt.Errorf("starting MPS control daemon: %w", err)
	}
	d.starts.Add(1)
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	deadline := time.Now().Add(d.cfg.ReadyTimeout)
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("MPS control daemon exited right after start (see %s): %v", d.cfg.Layout.LogDir(), err)
		default:
		}
		if err := d.probe(ctx); err == nil {
			logger.Info("MPS control daemon started", "pid", proc.Pid(), "visibleDevices", d.cfg.VisibleDevices, "pipeDir", d.cfg.Layout.PipeDir())
			return &startedProcess{Process: proc, exited: exited}, nil
		} else if time.Now().After(deadline) {
			_ = proc.Kill()
			<-exited
			return nil, fmt.Errorf("MPS control daemon did not answer within %s: %w", d.cfg.ReadyTimeout, err)
		}
		select {
		case <-ctx.Done():
			_ = proc.Kill()
			<-exited
			return nil, fmt.Errorf("waiting for MPS control daemon: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startedProcess remembers the goroutine already waiting on the process.
type startedProcess struct {
	control.Process
	exited chan error
}

// supervise watches the daemon (proc nil = adopted) until cancelled and
// restarts it whenever it dies.
func (d *ProcessDaemon) supervise(ctx context.Context, proc control.Process, done chan struct{}) {
	defer close(done)
	logger := klog.FromContext(ctx).WithName("mps-supervisor")
	backoff := d.cfg.MinBackoff
	for {
		startedAt := time.Now()
		if sp, ok := proc.(*startedProcess); ok {
			select {
			case <-ctx.Done():
				if d.quitting.Load() {
					select {
					case <-sp.exited:
					case <-time.After(d.cfg.StopTimeout):
						logger.Info("MPS control daemon ignored quit; killing it", "pid", sp.Pid())
						_ = sp.Kill()
						<-sp.exited
					}
				}
				return
			case err := <-sp.exited:
				if d.quitting.Load() {
					// Stop's quit arrived before the cancellation.
					return
				}
				logger.Error(err, "MPS control daemon died; restarting", "pid", sp.Pid(), "backoff", backoff)
			}
		} else if !d.watchAdopted(ctx, logger) {
			return
		}
		if time.Since(startedAt) > d.cfg.MaxBackoff {
			backoff = d.cfg.MinBackoff
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, d.cfg.MaxBackoff)
			p, err := d.start(ctx)
			if err == nil {
				proc = p
				d.adopted.Store(false)
				break
			}
			logger.Error(err, "Restarting MPS control daemon failed", "nextBackoff", backoff)
		}
	}
}

// watchAdopted polls a daemon we did not start; false means cancelled.
func (d *ProcessDaemon) watchAdopted(ctx context.Context, logger klog.Logger) bool {
	ticker := time.NewTicker(d.cfg.ProbeInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
			if err := d.probe(ctx); err != nil {
				logger.Error(err, "Adopted MPS control daemon stopped answering; starting a new one")
				return true
			}
		}
	}
}

// Stop sends "quit" and waits for the supervisor to see the daemon leave.
// Without a supervisor it still quits a daemon left by an earlier process.
func (d *ProcessDaemon) Stop(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	logger := klog.FromContext(ctx)
	if d.cancel == nil {
		if err := d.probe(ctx); err != nil {
			return nil
		}
		logger.Info("Stopping an MPS control daemon nobody uses")
		if err := d.quit(ctx); err != nil {
			return fmt.Errorf("stopping MPS control daemon: %w", err)
		}
		return nil
	}
	d.quitting.Store(true)
	quitErr := d.quit(ctx)
	d.cancel()
	<-d.done
	d.cancel, d.done = nil, nil
	if quitErr != nil && d.adopted.Load() {
		// An adopted daemon has no process handle to kill.
		return fmt.Errorf("stopping the adopted MPS control daemon: %w", quitErr)
	}
	if quitErr != nil {
		// Our child is gone either way: the supervisor waited for it or
		// killed it, or it had died and was waiting to be restarted.
		logger.V(2).Info("MPS control daemon did not take quit; it is stopped anyway", "err", quitErr)
	}
	logger.Info("MPS control daemon stopped")
	return nil
}

// Close stops supervision and leaves the daemon running.
func (d *ProcessDaemon) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.cancel, d.done = nil, nil
}

// PrivateShmWrapper returns the command prefix that starts the daemon in a
// private mount namespace whose /dev/shm is shmDir, the daemon's own (not
// the host's; shares' containers have their claim's). shmDir should be on a tmpfs
// (the default MPS root under /run is).
func PrivateShmWrapper(shmDir string) []string {
	return []string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /dev/shm && exec "$@"`, shmDir}
}

// Package inpod is the MPS daemon pod's entry point (`dra-kubelet-plugin
// mps-daemon`): it runs the control daemon, or on fake GPUs the stand-in,
// as the pod's main process.
package inpod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/standin"
)

// Config is what `dra-kubelet-plugin mps-daemon` runs inside
// the daemon pod. The MPS variables (CUDA_MPS_PIPE_DIRECTORY,
// CUDA_MPS_LOG_DIRECTORY, CUDA_VISIBLE_DEVICES) come from the pod's
// environment, which daemon.BuildPod sets.
type Config struct {
	// Binary is nvidia-cuda-mps-control.
	Binary string
	// MultiUser runs the daemon in multi-user mode (-m in MPS v3, -M in
	// legacy MPS).
	MultiUser bool
	// Protocol is 3 for MPS v3, 2 for legacy; 0 reads the pod's
	// CUDA_MPS_PROTOCOL_VERSION.
	Protocol int
	// Env is added to the daemon's and the quit command's environment,
	// e.g. the driver root's PATH and LD_LIBRARY_PATH.
	Env       []string
	Commander control.Commander
	// QuitTimeout is how long the daemon may take to leave after quit
	// before it is killed. Default 20s (the pod's grace period is 30s).
	QuitTimeout time.Duration
}

// PipeDirFromEnv returns CUDA_MPS_PIPE_DIRECTORY, which the pod must set.
func PipeDirFromEnv() (string, error) {
	dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("CUDA_MPS_PIPE_DIRECTORY must be an absolute path (got %q); the plugin sets it in the MPS daemon pod", dir)
	}
	return dir, nil
}

// Run runs nvidia-cuda-mps-control -f (MPS v3: -p 3 -m -f),
// its standard input held open, until ctx ends (the pod is deleted:
// SIGTERM), then sends it quit (MPS v3: -q) so that its server shuts down
// cleanly. It runs the daemon as a child rather than exec'ing it because
// PID 1 of a container gets no SIGTERM it does not handle. A daemon that
// exits on its own is an error: the container exits and the kubelet
// restarts it.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	pipeDir, err := PipeDirFromEnv()
	if err != nil {
		return err
	}
	if err := removeStaleSocket(ctx, pipeDir); err != nil {
		return err
	}
	if cfg.Commander == nil {
		cfg.Commander = control.ExecCommander{}
	}
	if cfg.QuitTimeout == 0 {
		cfg.QuitTimeout = 20 * time.Second
	}
	if cfg.Protocol == 0 {
		cfg.Protocol = protocolFromEnv()
	}
	argv := append([]string{cfg.Binary}, control.DaemonArgs(cfg.Protocol, cfg.MultiUser)...)
	proc, err := cfg.Commander.Start(ctx, argv, cfg.Env)
	if err != nil {
		return fmt.Errorf("starting the MPS control daemon: %w", err)
	}
	logger.Info("MPS control daemon started", "pid", proc.Pid(), "argv", argv,
		"pipeDir", os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), "visibleDevices", os.Getenv("CUDA_VISIBLE_DEVICES"))
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("the MPS control daemon exited (see $CUDA_MPS_LOG_DIRECTORY/control.log): %v", err)
	case <-ctx.Done():
	}
	logger.Info("Stopping: sending quit to the MPS control daemon")
	quitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.QuitTimeout)
	defer cancel()
	quit := control.Client{Runner: cfg.Commander, Binary: cfg.Binary, PipeDir: pipeDir, Protocol: cfg.Protocol, Env: cfg.Env, Timeout: cfg.QuitTimeout}
	if err := quit.Quit(quitCtx); err != nil {
		logger.Error(err, "quit failed; waiting for the daemon anyway")
	}
	select {
	case <-exited:
		logger.Info("MPS control daemon stopped")
	case <-quitCtx.Done():
		logger.Info("MPS control daemon ignored quit; killing it", "pid", proc.Pid())
		_ = proc.Kill()
		<-exited
	}
	return nil
}

// RunSimulated stands in for the control daemon on nodes with
// fake GPUs: the stand-in daemon (standin.RunDaemon) on the control
// socket of pipeDir, logging to the layout's log directory, so that the
// plugin's readiness check and an e2e test can observe a daemon and the
// commands it got. It never runs a server and enforces nothing.
//
// The stand-in's switches (package standin) are read from the pod's environment.
func RunSimulated(ctx context.Context, pipeDir string) error {
	if filepath.Base(pipeDir) != "pipe" {
		return fmt.Errorf("simulated MPS daemon: pipe directory %s does not end in /pipe", pipeDir)
	}
	// daemon.Layout's directories: pipe and log under one root (this package
	// is below daemon, whose tests run it as the fake kubelet's container).
	root := filepath.Dir(pipeDir)
	logDir := filepath.Join(root, "log")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		logDir = "" // a read-only root: serve without the log
	}
	// The pod's CUDA_MPS_PROTOCOL_VERSION chooses MPS v3, as for the real
	// control daemon.
	protocol := protocolFromEnv()
	if err := removeStaleSocket(ctx, pipeDir); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("SIMULATED MPS control daemon (fake GPUs): a stand-in on the control socket; no MPS server runs and nothing is enforced", "socket", filepath.Join(pipeDir, "control"), "protocol", protocol)
	return standin.RunDaemon(ctx, standin.Config{PipeDir: pipeDir, LogDir: logDir, Protocol: protocol,
		UnderscoreColumns: os.Getenv(standin.EnvCSVSpelling) == "underscore", Hang: standin.ParseHang(os.Getenv(standin.EnvHang))})
}

// protocolFromEnv is 3 when CUDA_MPS_PROTOCOL_VERSION says so, else 2.
func protocolFromEnv() int {
	if os.Getenv("CUDA_MPS_PROTOCOL_VERSION") == "3" {
		return 3
	}
	return 2
}

// removeStaleSocket clears the socket a daemon of an earlier container of
// this pod left when it died (the kubelet restarts the container): a new
// daemon cannot bind over it, and every share would fail with it. A socket
// something still listens on is not touched.
func removeStaleSocket(ctx context.Context, pipeDir string) error {
	if _, err := control.RemoveStaleSocket(ctx, pipeDir); err != nil {
		return fmt.Errorf("preparing the MPS pipe directory: %w", err)
	}
	return nil
}

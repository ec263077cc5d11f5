package mps

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Process is a started long-running command.
type Process interface {
	Pid() int
	// Wait blocks until the process exits and reports how.
	Wait() error
	// Kill ends the process forcibly.
	Kill() error
}

// Commander runs the MPS control binary. ExecCommander is the real one; tests
// use it too, pointed at a fake binary.
type Commander interface {
	// Start launches a long-running process.
	Start(ctx context.Context, argv, env []string) (Process, error)
	// Run runs a short command with the given standard input and returns its
	// combined output.
	Run(ctx context.Context, argv, env []string, stdin string) ([]byte, error)
}

// ExecCommander runs commands with os/exec.
type ExecCommander struct{}

type execProcess struct{ cmd *exec.Cmd }

func (p execProcess) Pid() int    { return p.cmd.Process.Pid }
func (p execProcess) Wait() error { return p.cmd.Wait() }
func (p execProcess) Kill() error { return p.cmd.Process.Kill() }

// Start launches argv in its own process group, so that a signal sent to the
// plugin's group (e.g. Ctrl-C) does not take the daemon down with it: running
// MPS clients must survive a plugin restart.
func (ExecCommander) Start(_ context.Context, argv, env []string) (Process, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("starting process: empty command")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return execProcess{cmd: cmd}, nil
}

// Run runs argv to completion.
func (ExecCommander) Run(ctx context.Context, argv, env []string, stdin string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("running command: empty command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewBufferString(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("running %s: %w (output: %q)", argv[0], err, bytes.TrimSpace(out))
	}
	return out, nil
}

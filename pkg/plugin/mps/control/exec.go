package control

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is a started long-running command.
type Process interface {
	Pid() int
	// Wait blocks until the process exits and reports how.
	Wait() error
	// Kill ends the process forcibly.
	Kill() error
}

// Runner runs a short command: the MPS control binary as a client.
// ExecCommander runs the real binary, standin.Runner the stand-in in this
// process.
type Runner interface {
	// Run runs a short command with the given standard input and returns its
	// combined output. It ends the command when ctx ends.
	Run(ctx context.Context, argv, env []string, stdin string) ([]byte, error)
}

// Commander runs the MPS control binary. ExecCommander is the real one; tests
// use it too, pointed at a fake binary.
type Commander interface {
	Runner
	// Start launches a long-running process. Its standard input stays open
	// for its whole life: a foreground (-f) MPS control daemon exits when
	// its standard input ends (reported for r615 by NVIDIA's KAI project).
	Start(ctx context.Context, argv, env []string) (Process, error)
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
	stdin, err := openEndlessStdin()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	// The child has its own descriptor; ours is not needed after the start.
	defer func() { _ = stdin.Close() }()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return execProcess{cmd: cmd}, nil
}

// openEndlessStdin returns a standard input that never reaches end of
// file and outlives this process: a pipe opened for reading and writing.
// The child holds the pipe's only writer itself, so its reads block for
// ever, also after the plugin that started it has exited (a daemon left
// running across a plugin restart keeps its stdin open); a pipe whose
// write end the plugin held would end with the plugin. Linux reopens a
// pipe read and write through /proc/self/fd; where that fails, an
// unlinked FIFO in the temporary directory does the same.
func openEndlessStdin() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating the daemon's standard input: %w", err)
	}
	defer func() { _ = r.Close(); _ = w.Close() }()
	if f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", r.Fd()), os.O_RDWR, 0); err == nil {
		return f, nil
	}
	dir, err := os.MkdirTemp("", "mps-stdin")
	if err != nil {
		return nil, fmt.Errorf("creating the daemon's standard input: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	fifo := filepath.Join(dir, "stdin")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("creating the daemon's standard input: %w", err)
	}
	// O_RDWR on a FIFO opens without waiting for a peer (Linux).
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the daemon's standard input: %w", err)
	}
	return f, nil
}

// Run runs argv to completion.
func (ExecCommander) Run(ctx context.Context, argv, env []string, stdin string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("running command: empty command")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewBufferString(stdin)
	// A killed client's children must not keep Run waiting for output.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return out, fmt.Errorf("running %s: %w (output: %q)", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

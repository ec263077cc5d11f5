// Package control runs nvidia-cuda-mps-control as a client, behind Runner:
// ExecCommander runs the real binary, standin.Runner the stand-in in this
// process, so the plugin's client code is the same with either.
package control

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// How the plugin talks to nvidia-cuda-mps-control as a client. Legacy MPS
// (protocol 2) reads its commands on standard input (`echo quit |
// nvidia-cuda-mps-control`); MPS v3 has no interactive shell and takes each
// command as arguments, after the same -p the daemon was started with
// (`nvidia-cuda-mps-control -p 3 namespace list ...`), and quits with -q
// (NVIDIA, "MPS v3 Interface"; NVIDIA's KAI project, verified on r615).
// Every call has a deadline: a daemon that never answers must not hold a
// prepare, or the node, for ever.

// Func runs one control command, given as its words (e.g.
// ["namespace", "list", "--server=tangram", "--format=csv"]), and returns
// its answer; an answer that reports a failure is an error.
type Func func(ctx context.Context, command []string) (string, error)

// DefaultTimeout bounds one control command: a Client's, and the mps
// Manager's deadline on each command it sends (Timing.ControlTimeout).
const DefaultTimeout = 10 * time.Second

// BinaryName is the control binary's name.
const BinaryName = "nvidia-cuda-mps-control"

// Client runs the control binary as a client of the daemon on
// PipeDir.
type Client struct {
	Runner Runner
	Binary string
	// PipeDir is the daemon's CUDA_MPS_PIPE_DIRECTORY.
	PipeDir string
	// Protocol 3 gives commands as arguments; 2 (or 0) on standard input.
	Protocol int
	// Env is added to the environment, e.g. CUDA_MPS_LOG_DIRECTORY and the
	// driver root's PATH and LD_LIBRARY_PATH (driverroot.Root.ToolEnv).
	Env []string
	// Timeout bounds each command; 0 is DefaultTimeout.
	Timeout time.Duration
}

func (c Client) env() []string {
	return append([]string{"CUDA_MPS_PIPE_DIRECTORY=" + c.PipeDir}, c.Env...)
}

func (c Client) runner() Runner {
	if c.Runner == nil {
		return ExecCommander{}
	}
	return c.Runner
}

// run runs the binary with args and stdin under the deadline; an error
// names the command.
func (c Client) run(ctx context.Context, args []string, stdin, what string) (string, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.runner().Run(ctx, append([]string{c.Binary}, args...), c.env(), stdin)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return string(out), fmt.Errorf("MPS control command %q got no answer within %s: %w", what, timeout, err)
		}
		return string(out), fmt.Errorf("MPS control command %q: %w", what, err)
	}
	return string(out), nil
}

// Command runs one command: as arguments after "-p 3" in MPS v3, as a line
// on standard input in legacy MPS.
func (c Client) Command(ctx context.Context, command []string) (string, error) {
	line := strings.Join(command, " ")
	if c.Protocol == 3 {
		return c.run(ctx, append([]string{"-p", "3"}, command...), "", line)
	}
	return c.run(ctx, nil, line+"\n", line)
}

// Quit asks the daemon to quit: -q in MPS v3, "quit" on standard input in
// legacy MPS.
func (c Client) Quit(ctx context.Context) error {
	if c.Protocol == 3 {
		_, err := c.run(ctx, []string{"-p", "3", "-q"}, "", "-q")
		return err
	}
	_, err := c.run(ctx, nil, "quit\n", "quit")
	return err
}

// Probe succeeds when a daemon answers: "server list" in MPS v3,
// get_server_list in legacy MPS.
func (c Client) Probe(ctx context.Context) error {
	cmd := []string{"get_server_list"}
	if c.Protocol == 3 {
		cmd = []string{"server", "list", "--format=csv"}
	}
	_, err := c.Command(ctx, cmd)
	return err
}

// Option adjusts Binary.
type Option func(*Client)

// WithTimeout bounds each command (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.Timeout = d }
}

// WithEnv adds variables to the binary's environment, e.g. the
// driver root's PATH and LD_LIBRARY_PATH.
func WithEnv(env ...string) Option {
	return func(c *Client) { c.Env = append(c.Env, env...) }
}

// Binary runs the control binary as an MPS v3 client of the daemon
// on pipeDir, each command as arguments, e.g. from the plugin when the
// daemon runs in a pod and shares the host's pipe directory. A nil runner
// runs the binary (ExecCommander).
func Binary(runner Runner, binary, pipeDir string, opts ...Option) Func {
	c := Client{Runner: runner, Binary: binary, PipeDir: pipeDir, Protocol: 3}
	for _, o := range opts {
		o(&c)
	}
	return c.Command
}

// DaemonArgs are the control binary's options to run the daemon in the
// foreground: MPS v3 "-p 3 [-m] -f" (NVIDIA's KAI project runs r615 so),
// legacy "-f [-M]".
func DaemonArgs(protocol int, multiUser bool) []string {
	if protocol == 3 {
		args := []string{"-p", "3"}
		if multiUser {
			args = append(args, "-m")
		}
		return append(args, "-f")
	}
	args := []string{"-f"}
	if multiUser {
		args = append(args, "-M")
	}
	return args
}

// TimeoutError answers a control command that got no answer within its
// deadline (the mps Manager's Timing.ControlTimeout): the control daemon
// is hung or overloaded. The mps Manager marks it unresponsive until a
// later command is answered.
type TimeoutError struct {
	Command string
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the node's MPS control daemon did not answer %q within %s", e.Command, e.Timeout)
}

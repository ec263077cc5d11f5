package main

import (
	"github.com/spf13/cobra"

	"github.com/tangram-gpu/tangram/pkg/sharing"
)

// newMPSDaemonCommand is what the MPS daemon pod runs (--mps-daemon=pod).
// The pod's environment carries CUDA_MPS_PIPE_DIRECTORY,
// CUDA_MPS_LOG_DIRECTORY and CUDA_VISIBLE_DEVICES.
func newMPSDaemonCommand() *cobra.Command {
	var (
		binary    string
		multiUser bool
		simulate  bool
	)
	cmd := &cobra.Command{
		Use:   "mps-daemon",
		Short: "Run the node's MPS control daemon in the foreground (the daemon pod's command)",
		Long: `Runs nvidia-cuda-mps-control -f with the MPS directories and cards of the
pod's environment and sends it quit on SIGTERM. With --simulate (fake GPUs)
it only listens on the control socket of $CUDA_MPS_PIPE_DIRECTORY, so that
the plugin and tests can see a daemon; nothing is enforced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if simulate {
				pipeDir, err := sharing.PipeDirFromEnv()
				if err != nil {
					return err
				}
				return sharing.RunSimulatedControlDaemon(ctx, pipeDir)
			}
			return sharing.RunControlDaemon(ctx, sharing.ControlDaemonConfig{Binary: binary, MultiUser: multiUser})
		},
	}
	f := cmd.Flags()
	f.StringVar(&binary, "mps-control-binary", "nvidia-cuda-mps-control", "MPS control binary (name in $PATH or path)")
	f.BoolVar(&multiUser, "mps-multi-user", false, "start the daemon with -M")
	f.BoolVar(&simulate, "simulate", false, "fake GPUs: listen on the control socket instead of running MPS")
	return cmd
}

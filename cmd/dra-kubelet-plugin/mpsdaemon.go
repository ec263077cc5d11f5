package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
)

// newMPSDaemonCommand is what the MPS daemon pod runs (--mps-daemon=pod).
// The pod's environment carries CUDA_MPS_PIPE_DIRECTORY,
// CUDA_MPS_LOG_DIRECTORY and CUDA_VISIBLE_DEVICES.
func newMPSDaemonCommand() *cobra.Command {
	var (
		binary     string
		driverRoot string
		multiUser  bool
		simulate   bool
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
				pipeDir, err := mps.PipeDirFromEnv()
				if err != nil {
					return err
				}
				return mps.RunSimulatedControlDaemon(ctx, pipeDir)
			}
			if binary == "" {
				found, err := driverroot.Root{Path: driverRoot}.Executable(driverroot.MPSControl)
				if err != nil {
					return fmt.Errorf("the MPS daemon pod runs the driver's nvidia-cuda-mps-control: %w; or pass --mps-control-binary", err)
				}
				binary = found
			}
			return mps.RunControlDaemon(ctx, mps.ControlDaemonConfig{Binary: binary, MultiUser: multiUser})
		},
	}
	f := cmd.Flags()
	f.StringVar(&binary, "mps-control-binary", "", "MPS control binary (name in $PATH or path); default: nvidia-cuda-mps-control under --driver-root")
	f.StringVar(&driverRoot, "driver-root", driverroot.FromEnv(), "root of the NVIDIA driver installation (default: $NVIDIA_DRIVER_ROOT, which the plugin sets to the pod's /driver-root mount, else /)")
	f.BoolVar(&multiUser, "mps-multi-user", false, "start the daemon with -M")
	f.BoolVar(&simulate, "simulate", false, "fake GPUs: listen on the control socket instead of running MPS")
	return cmd
}

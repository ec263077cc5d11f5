package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tangram-gpu/tangram/pkg/plugin/driverroot"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/inpod"
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
		Long: `Runs nvidia-cuda-mps-control -f (MPS v3, when the pod's
CUDA_MPS_PROTOCOL_VERSION is 3: -p 3 -m -f) with the MPS directories and
cards of the pod's environment, its standard input held open, and sends it
quit (MPS v3: -q) on SIGTERM. With --simulate (fake GPUs)
it only listens on the control socket of $CUDA_MPS_PIPE_DIRECTORY, so that
the plugin and tests can see a daemon; nothing is enforced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if simulate {
				pipeDir, err := inpod.PipeDirFromEnv()
				if err != nil {
					return err
				}
				return inpod.RunSimulated(ctx, pipeDir)
			}
			var env []string
			if binary == "" {
				root := driverroot.Root{Path: driverRoot}
				found, err := root.Executable(driverroot.MPSControl)
				if err != nil {
					return fmt.Errorf("the MPS daemon pod runs the driver's nvidia-cuda-mps-control: %w; or pass --mps-control-binary", err)
				}
				// The driver's binary runs with the driver's own libraries.
				binary, env = found, root.ToolEnv()
			}
			return inpod.Run(ctx, inpod.Config{Binary: binary, MultiUser: multiUser, Env: env})
		},
	}
	f := cmd.Flags()
	f.StringVar(&binary, "mps-control-binary", "", "MPS control binary (name in $PATH or path); default: nvidia-cuda-mps-control under --driver-root")
	f.StringVar(&driverRoot, "driver-root", driverroot.FromEnv(), "root of the NVIDIA driver installation (default: $NVIDIA_DRIVER_ROOT, which the plugin sets to the pod's /driver-root mount, else /)")
	// Off unless given: the plugin builds the daemon pod's command with
	// --mps-multi-user exactly when its own --mps-multi-user (default on)
	// or MPS v3 asks for it (daemon.BuildPod), and the chart's
	// admission policy admits exactly those commands; a pod an older plugin
	// created without the flag keeps running as it was started.
	f.BoolVar(&multiUser, "mps-multi-user", false, "start the daemon in multi-user mode (-m with MPS v3, -M legacy); the plugin passes it to the daemon pod it creates when its own --mps-multi-user is on (the default)")
	f.BoolVar(&simulate, "simulate", false, "fake GPUs: listen on the control socket instead of running MPS")
	return cmd
}

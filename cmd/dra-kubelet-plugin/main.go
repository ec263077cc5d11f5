// Command dra-kubelet-plugin is Tangram's DRA kubelet plugin: it publishes
// the node's GPUs as ResourceSlices and prepares claimed devices.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	klog.Flush()
	if err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:          "dra-kubelet-plugin",
		Short:        "Tangram DRA kubelet plugin for NVIDIA GPUs",
		SilenceUsage: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			// Flags are parsed now, so the logger reflects -v and friends.
			cmd.SetContext(klog.NewContext(cmd.Context(), klog.Background()))
		},
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlagSet(klogFlags)

	root.AddCommand(newSlicesCommand())
	root.AddCommand(newRunCommand())
	root.AddCommand(newMPSDaemonCommand())
	root.AddCommand(newHealthEventCommand())
	root.AddCommand(newFakeProcessesCommand())
	root.AddCommand(newGPUCheckCommand())
	root.AddCommand(newMPSCheckCommand())
	return root
}

// Command dra-controller is Tangram's cluster controller: GpuGangs, the
// GpuConfig admission webhook and cluster-wide GPU allocation metrics.
// See docs/controller.md.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/controller/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newCommand().ExecuteContext(ctx)
	stop()
	klog.Flush()
	if err != nil {
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var opts app.Options
	cmd := &cobra.Command{
		Use:          "dra-controller",
		Short:        "Tangram controller: GpuGangs, GpuConfig admission webhook, GPU allocation metrics",
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Complete()
			if err := opts.Validate(); err != nil {
				return err
			}
			logger := klog.Background()
			return app.Run(klog.NewContext(cmd.Context(), logger), opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	cmd.Flags().AddGoFlagSet(klogFlags)
	return cmd
}

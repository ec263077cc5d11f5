// kubectl-tangram is a kubectl plugin: on PATH it runs as `kubectl tangram`.
// It shows the cluster-wide picture of Tangram GPUs and why claims pend.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/tangram-gpu/tangram/pkg/clusterview/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := cli.NewCommand(os.Stdout).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

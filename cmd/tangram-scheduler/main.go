// Command tangram-scheduler is kube-scheduler 1.37 with Tangram's
// TangramPacking score plugin and TangramPreemption PostFilter plugin
// registered; run it as a second scheduler (schedulerName: tangram). See
// docs/placement.md.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/packing"
	"github.com/tangram-gpu/tangram/cmd/tangram-scheduler/internal/preempt"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(packing.Name, packing.New),
		app.WithPlugin(preempt.Name, preempt.New))
	os.Exit(cli.Run(command))
}

package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/app"
)

// newHealthEventCommand injects a health event for fake cards: tests and
// demos make a card fail or recover with it.
func newHealthEventCommand() *cobra.Command {
	var (
		index      int
		xid        uint64
		lost       bool
		recovered  bool
		message    string
		stateDir   string
		eventsFile string
		instance   int
	)
	cmd := &cobra.Command{
		Use:   "health-event",
		Short: "Inject a health event (XID, GPU lost, recovery) for a fake GPU of the running plugin",
		Example: `  # in the plugin's container (or on the node, with its --state-dir):
  dra-kubelet-plugin health-event --gpu 1 --xid 79       # fatal: NoSchedule taint
  dra-kubelet-plugin health-event --gpu 1 --xid 13       # informational: None taint
  dra-kubelet-plugin health-event --gpu 3 --xid 43 --gpu-instance 1   # one MIG instance: only its partition
  dra-kubelet-plugin health-event --gpu 1 --lost
  dra-kubelet-plugin health-event --gpu 1 --recovered`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ev := gpu.HealthEvent{Index: index, Message: message}
			kinds := 0
			if xid != 0 {
				ev.Kind, ev.XID = gpu.HealthEventXID, xid
				kinds++
			}
			if lost {
				ev.Kind = gpu.HealthEventGPULost
				kinds++
			}
			if recovered {
				ev.Kind = gpu.HealthEventRecovered
				kinds++
			}
			if kinds != 1 {
				return errors.New("pass exactly one of --xid=<n>, --lost or --recovered")
			}
			if index < 0 {
				return errors.New("--gpu=<index> is required (the card's index, device gpu-<index>)")
			}
			if instance >= 0 {
				if ev.Kind != gpu.HealthEventXID {
					return errors.New("--gpu-instance goes with --xid: NVML reports XIDs per MIG instance")
				}
				ev.GPUInstance = &instance
			}
			path := app.HealthEventsFile(eventsFile, stateDir)
			if err := gpu.AppendHealthEvent(path, ev); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "appended %s event for gpu-%d to %s\n", ev.Kind, index, path)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&index, "gpu", -1, "index of the card (device gpu-<index>)")
	f.Uint64Var(&xid, "xid", 0, "report this XID")
	f.IntVar(&instance, "gpu-instance", -1, "with --xid: the MIG GPU instance ID the XID is in (nvidia-smi mig -lgi; the claim's status.devices data); unset: the whole card")
	f.BoolVar(&lost, "lost", false, "report the card lost (fallen off the bus)")
	f.BoolVar(&recovered, "recovered", false, "report the card recovered: its health taints go")
	f.StringVar(&message, "message", "", "detail shown in the Node event and pod status")
	f.StringVar(&stateDir, "state-dir", "/var/lib/tangram", "the plugin's --state-dir")
	f.StringVar(&eventsFile, "fake-health-events-file", "", "the plugin's --fake-health-events-file (default: "+app.HealthEventsFileName+" in --state-dir)")
	return cmd
}

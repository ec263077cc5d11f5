package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/health"
)

// healthEventsFileName is the fake cards' health control file in the
// state directory (see docs/health.md).
const healthEventsFileName = "health-events.jsonl"

// healthFlags configure the GPU health monitor.
type healthFlags struct {
	Enabled           bool
	InformationalXIDs string
	IgnoredXIDs       string
	RecoverAfter      time.Duration
	EventsFile        string
}

func (f *healthFlags) AddFlags(flags *pflag.FlagSet) {
	flags.BoolVar(&f.Enabled, "health-monitor", true, "watch the cards' health (NVML XID and GPU-lost events; the events file with fake GPUs), taint unhealthy cards in the ResourceSlice and report health to the kubelet")
	flags.StringVar(&f.InformationalXIDs, "health-informational-xids", joinXIDs(health.DefaultInformationalXIDs), "XIDs that only get a None taint (visible, not blocking); every XID in neither list gets NoSchedule")
	flags.StringVar(&f.IgnoredXIDs, "health-ignored-xids", "", "XIDs that get no taint at all (still logged)")
	flags.DurationVar(&f.RecoverAfter, "health-recover-after", health.DefaultRecoverAfter, "remove a card's XID taint when no new XID came for this long; 0 keeps it until the card reports recovery")
	flags.StringVar(&f.EventsFile, "fake-health-events-file", "", "fake GPUs only: JSON-lines file of injected health events (default: "+healthEventsFileName+" in --state-dir; `dra-kubelet-plugin health-event` appends to it)")
}

// policy parses the XID lists.
func (f *healthFlags) policy() (health.Policy, error) {
	informational, err := health.ParseXIDList(f.InformationalXIDs)
	if err != nil {
		return health.Policy{}, fmt.Errorf("--health-informational-xids: %w", err)
	}
	ignored, err := health.ParseXIDList(f.IgnoredXIDs)
	if err != nil {
		return health.Policy{}, fmt.Errorf("--health-ignored-xids: %w", err)
	}
	p := health.Policy{InformationalXIDs: informational, IgnoredXIDs: ignored}
	if err := p.Validate(); err != nil {
		return health.Policy{}, fmt.Errorf("--health-informational-xids and --health-ignored-xids: %w", err)
	}
	if f.RecoverAfter < 0 {
		return health.Policy{}, fmt.Errorf("--health-recover-after=%s is negative: use 0 to recover only on a recovery event", f.RecoverAfter)
	}
	return p, nil
}

// watcher returns where health events come from: the events file for fake
// cards, NVML's event set for real ones; nil when disabled or when the
// source cannot watch.
func (f *healthFlags) watcher(ctx context.Context, src gpu.Source, fake bool, stateDir string) gpu.HealthWatcher {
	if !f.Enabled {
		klog.FromContext(ctx).Info("GPU health monitor disabled (--health-monitor=false): no health taints, the kubelet gets no device health")
		return nil
	}
	if fake {
		return gpu.FileHealthWatcher{Path: healthEventsFile(f.EventsFile, stateDir)}
	}
	if w, ok := src.(gpu.HealthWatcher); ok {
		return w
	}
	klog.FromContext(ctx).Info("This GPU source cannot watch health events; health is not monitored")
	return nil
}

func healthEventsFile(flag, stateDir string) string {
	if flag != "" {
		return flag
	}
	return filepath.Join(stateDir, healthEventsFileName)
}

func joinXIDs(xids []uint64) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

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
			path := healthEventsFile(eventsFile, stateDir)
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
	f.StringVar(&eventsFile, "fake-health-events-file", "", "the plugin's --fake-health-events-file (default: "+healthEventsFileName+" in --state-dir)")
	return cmd
}

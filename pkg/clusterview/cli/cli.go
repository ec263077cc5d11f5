// Package cli is the command line of kubectl-tangram: flags, kubeconfig
// and wiring of fetch → view/diagnosis → rendering. cmd/kubectl-tangram
// only calls NewCommand.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tangram-gpu/tangram/pkg/cluster/fetch"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/clusterview/describe"
	"github.com/tangram-gpu/tangram/pkg/kubeconfig"
)

// options are the flags every subcommand shares.
type options struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	output     string
	colour     string
	out        io.Writer
	// newClients is replaceable in tests.
	newClients func() (*clients, error)
}

// clients talk to the API server; namespace is the one to use (-n, else the
// kubeconfig context's, else "default").
type clients struct {
	kube      kubernetes.Interface
	dynamic   dynamic.Interface
	namespace string
	// metrics reads a kubelet plugin pod's /metrics; nil is through the
	// API server's pod proxy (tests replace it).
	metrics metricsReader
}

// NewCommand returns the kubectl-tangram root command writing to out.
func NewCommand(out io.Writer) *cobra.Command {
	return newCommand(out, nil)
}

// newCommand lets tests supply the clients.
func newCommand(out io.Writer, newClients func() (*clients, error)) *cobra.Command {
	o := &options{out: out, newClients: newClients}
	if o.newClients == nil {
		o.newClients = o.clients
	}
	root := &cobra.Command{
		Use: "kubectl-tangram",
		// Help and usage read "kubectl tangram", as kubectl runs it.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl tangram"},
		Short:       "Show Tangram GPUs, shares and claims across the cluster",
		Long: "kubectl tangram shows which pod holds which GPU or share, how full each card is, and why a claim is pending.\n" +
			"It only reads ResourceSlices, ResourceClaims, DeviceClasses, Nodes and Pods, and for top the kubelet plugin's metrics.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	flags := root.PersistentFlags()
	flags.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	clientcmd.BindOverrideFlags(&o.overrides, flags, clientcmd.RecommendedConfigOverrideFlags(""))
	flags.StringVarP(&o.output, "output", "o", clusterview.FormatTable, "Output format: table, json or yaml")
	flags.StringVar(&o.colour, "color", "auto", "Colour the table: auto (on a terminal, unless NO_COLOR is set), always or never")
	root.AddCommand(newStatusCommand(o), newDescribeCommand(o), newTopCommand(o))
	return root
}

// clients builds the clients from the kubeconfig and flags.
func (o *options) clients() (*clients, error) {
	rest, ns, err := kubeconfig.Load(kubeconfig.Options{Path: o.kubeconfig, Overrides: &o.overrides, UserAgent: "kubectl-tangram"})
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return &clients{kube: kube, dynamic: dyn, namespace: ns}, nil
}

// start checks the output flags and builds the style and the clients:
// what every subcommand does first.
func (o *options) start() (clusterview.Style, *clients, error) {
	if err := clusterview.CheckFormat(o.output); err != nil {
		return clusterview.Style{}, nil, err
	}
	st, err := o.style()
	if err != nil {
		return clusterview.Style{}, nil, err
	}
	c, err := o.newClients()
	if err != nil {
		return clusterview.Style{}, nil, err
	}
	return st, c, nil
}

// style decides on colour: only for tables, on a terminal, without NO_COLOR.
func (o *options) style() (clusterview.Style, error) {
	switch o.colour {
	case "always":
		return clusterview.Style{Colour: true}, nil
	case "never":
		return clusterview.Style{}, nil
	case "auto":
		f, ok := o.out.(*os.File)
		_, noColour := os.LookupEnv("NO_COLOR")
		return clusterview.Style{Colour: ok && !noColour && term.IsTerminal(int(f.Fd()))}, nil
	}
	return clusterview.Style{}, fmt.Errorf("unknown --color %q: use auto, always or never", o.colour)
}

func newStatusCommand(o *options) *cobra.Command {
	var node string
	var explain int
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Per node and card: memory and compute used, shares, NVLink domain, claims and pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, c, err := o.start()
			if err != nil {
				return err
			}
			snap, err := fetch.Snapshot(cmd.Context(), c.kube, fetch.What{})
			if err != nil {
				return err
			}
			if snap.Gangs, err = fetch.Gangs(cmd.Context(), c.dynamic); err != nil {
				return err
			}
			v := clusterview.Build(snap, clusterview.Options{Node: node})
			if err := describe.ExplainPending(cmd.Context(), snap, v, explain); err != nil {
				return err
			}
			if node != "" && len(v.Nodes) == 0 {
				return fmt.Errorf("node %q publishes no gpu.tangram.dev devices (check the name with kubectl get resourceslices)", node)
			}
			if o.output != clusterview.FormatTable {
				return clusterview.WriteData(o.out, o.output, v)
			}
			return clusterview.WriteStatus(o.out, v, st)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "Show only this node")
	cmd.Flags().IntVar(&explain, "explain-pending", 10, "Say why for at most this many pending claims (each runs the allocator over the cluster; 0 turns it off)")
	return cmd
}

func newDescribeCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "describe (pod|claim)/NAME | describe (pod|claim) NAME",
		Short: "What a pod or claim got (cards, UUIDs, shares, limits), or why it is pending",
		Example: "  kubectl tangram describe pod/trainer-0 -n ml\n" +
			"  kubectl tangram describe claim/infer-gpu -n serve -o json",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := parseTarget(args)
			if err != nil {
				return err
			}
			st, c, err := o.start()
			if err != nil {
				return err
			}
			return runDescribe(cmd.Context(), o, c.kube, st, kind, c.namespace, name)
		},
	}
}

func runDescribe(ctx context.Context, o *options, client kubernetes.Interface, st clusterview.Style, kind, ns, name string) error {
	snap, err := fetch.Snapshot(ctx, client, fetch.What{Nodes: true})
	if err != nil {
		return err
	}
	if kind == "pod" {
		pod, err := fetch.Pod(ctx, client, ns, name)
		if err != nil {
			return err
		}
		r, err := describe.DescribePod(ctx, snap, pod)
		if err != nil {
			return err
		}
		if o.output != clusterview.FormatTable {
			return clusterview.WriteData(o.out, o.output, r)
		}
		return describe.WritePod(o.out, r, st)
	}
	claim, err := fetch.FindClaim(snap, ns, name)
	if err != nil {
		return err
	}
	r, err := describe.DescribeClaim(ctx, snap, claim)
	if err != nil {
		return err
	}
	if o.output != clusterview.FormatTable {
		return clusterview.WriteData(o.out, o.output, r)
	}
	return describe.WriteClaim(o.out, r, st)
}

// parseTarget accepts "pod/NAME", "claim/NAME" and the two-word forms, with
// the aliases kubectl users type.
func parseTarget(args []string) (kind, name string, err error) {
	if len(args) == 2 {
		kind, name = args[0], args[1]
	} else {
		var ok bool
		kind, name, ok = strings.Cut(args[0], "/")
		if !ok {
			return "", "", fmt.Errorf("%q names no kind: write pod/NAME or claim/NAME", args[0])
		}
	}
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		kind = "pod"
	case "claim", "claims", "resourceclaim", "resourceclaims":
		kind = "claim"
	default:
		return "", "", fmt.Errorf("cannot describe %q: only pod/NAME and claim/NAME are supported", kind)
	}
	if name == "" {
		return "", "", fmt.Errorf("missing name: write %s/NAME", kind)
	}
	return kind, name, nil
}

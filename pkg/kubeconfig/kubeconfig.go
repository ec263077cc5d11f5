// Package kubeconfig is the one way Tangram's binaries find their API
// server: the kubelet plugin, the controller and kubectl-tangram all load
// it here, with kubectl's rules.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options say where the configuration comes from.
type Options struct {
	// Path is an explicit kubeconfig file (--kubeconfig). Empty means
	// kubectl's rules: $KUBECONFIG, else ~/.kube/config, else the pod's
	// service account (in-cluster).
	Path string
	// Overrides are kubectl's --context, --namespace, ... flags; nil for
	// none.
	Overrides *clientcmd.ConfigOverrides
	// UserAgent names the binary in the API server's logs.
	UserAgent string
}

// Load returns the REST configuration and the namespace the kubeconfig (or
// the pod) selects.
func Load(opts Options) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = opts.Path
	overrides := opts.Overrides
	if overrides == nil {
		overrides = &clientcmd.ConfigOverrides{}
	}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		if opts.Path != "" {
			return nil, "", fmt.Errorf("loading kubeconfig %s: %w", opts.Path, err)
		}
		return nil, "", fmt.Errorf("no API server: pass --kubeconfig, set KUBECONFIG or run in a pod: %w", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	cfg.UserAgent = opts.UserAgent
	return cfg, ns, nil
}

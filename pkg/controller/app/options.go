// Package app wires the dra-controller: informers, the GpuGang controller
// under leader election, the GpuConfig admission webhook, allocation
// metrics and the health endpoint. cmd/dra-controller only parses flags.
package app

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/tangram-gpu/tangram/pkg/controller/admission"
)

// Options are the controller's settings, one flag each.
type Options struct {
	Kubeconfig string

	LeaderElect          bool
	LeaderElectNamespace string
	LeaderElectName      string
	// Identity names this replica in the Lease (the pod name).
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	HealthzAddress string
	MetricsAddress string

	GpuGangs      bool
	Workers       int
	PendingResync time.Duration

	WebhookAddress    string
	WebhookCertDir    string
	WebhookSecret     string
	WebhookService    string
	WebhookNamespace  string
	WebhookConfigName string
	// WebhookCertValidity is how long each self-managed certificate (and
	// its CA) is valid; it is renewed when a third is left.
	WebhookCertValidity time.Duration
}

// AddFlags registers the flags; defaults match the Helm chart.
func (o *Options) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then the in-cluster service account)")
	f.BoolVar(&o.LeaderElect, "leader-elect", false, "elect a leader through a Lease so that only one replica reconciles GpuGangs")
	f.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE)")
	f.StringVar(&o.LeaderElectName, "leader-elect-name", "tangram-controller", "name of the Lease")
	f.StringVar(&o.Identity, "identity", "", "this replica's name in the Lease (default: $POD_NAME, then the host name)")
	f.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a leader's Lease lasts without renewal")
	f.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before giving up")
	f.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew")
	f.StringVar(&o.HealthzAddress, "healthz-address", ":51516", "address of HTTP /healthz and /readyz; empty disables")
	f.StringVar(&o.MetricsAddress, "metrics-address", ":9090", "address of Prometheus /metrics; empty disables")
	f.BoolVar(&o.GpuGangs, "gpugangs", true, "run the GpuGang controller (needs the GpuGang CRD and scheduling.k8s.io/v1beta1)")
	f.IntVar(&o.Workers, "workers", 2, "GpuGangs reconciled in parallel")
	f.DurationVar(&o.PendingResync, "pending-resync", 30*time.Second, "how often a pending GpuGang's diagnosis is recomputed")
	f.StringVar(&o.WebhookAddress, "webhook-address", "", "address of the HTTPS admission webhook (e.g. :9443); empty disables")
	f.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "", "directory with tls.crt and tls.key (e.g. from cert-manager); empty: a self-signed certificate kept in --webhook-secret")
	f.StringVar(&o.WebhookSecret, "webhook-secret", "tangram-controller-webhook-tls", "Secret holding the self-managed webhook certificate")
	f.StringVar(&o.WebhookService, "webhook-service", "tangram-controller-webhook", "Service in front of the webhook, for the certificate's names")
	f.StringVar(&o.WebhookNamespace, "webhook-namespace", "", "namespace of the webhook Secret and Service (default: $POD_NAMESPACE)")
	f.StringVar(&o.WebhookConfigName, "webhook-config-name", "", "ValidatingWebhookConfiguration whose caBundle the controller sets; empty leaves it alone")
	f.DurationVar(&o.WebhookCertValidity, "webhook-cert-validity", admission.DefaultCertValidity, "validity of each self-managed webhook certificate and its CA; renewed while running when a third is left")
}

// Complete fills defaults from the pod's environment (downward API).
func (o *Options) Complete() {
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	if o.LeaderElectNamespace == "" {
		o.LeaderElectNamespace = os.Getenv("POD_NAMESPACE")
	}
	if o.WebhookNamespace == "" {
		o.WebhookNamespace = os.Getenv("POD_NAMESPACE")
	}
}

// Validate reports every bad combination at once.
func (o *Options) Validate() error {
	var errs []error
	if o.LeaderElect && o.LeaderElectNamespace == "" {
		errs = append(errs, errors.New("--leader-elect needs --leader-elect-namespace or $POD_NAMESPACE"))
	}
	if o.LeaderElect && (o.RenewDeadline >= o.LeaseDuration || o.RetryPeriod >= o.RenewDeadline) {
		errs = append(errs, fmt.Errorf("leader election needs retry period (%v) < renew deadline (%v) < lease duration (%v)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration))
	}
	if o.LeaderElect && o.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--leader-elect-retry-period is %v; it must be positive", o.RetryPeriod))
	}
	if o.LeaderElect && o.Identity == "" {
		errs = append(errs, errors.New("--leader-elect needs --identity, $POD_NAME or a host name"))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers is %d; it must be at least 1", o.Workers))
	}
	if o.PendingResync <= 0 {
		errs = append(errs, fmt.Errorf("--pending-resync is %v; it must be positive", o.PendingResync))
	}
	if o.WebhookAddress != "" && o.WebhookCertDir == "" && o.WebhookNamespace == "" {
		errs = append(errs, errors.New("a self-managed webhook certificate needs --webhook-namespace or $POD_NAMESPACE (or pass --webhook-cert-dir)"))
	}
	if o.WebhookAddress != "" && o.WebhookCertDir == "" && o.WebhookCertValidity < time.Hour {
		errs = append(errs, fmt.Errorf("--webhook-cert-validity is %v; it must be at least 1h (renewal stages a new CA %v before serving its certificate)",
			o.WebhookCertValidity, admission.DefaultCertStageFor))
	}
	return errors.Join(errs...)
}

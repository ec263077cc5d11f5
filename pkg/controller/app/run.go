package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/cluster/informer"
	"github.com/tangram-gpu/tangram/pkg/controller/admission"
	"github.com/tangram-gpu/tangram/pkg/controller/gang"
	"github.com/tangram-gpu/tangram/pkg/controller/metrics"
	"github.com/tangram-gpu/tangram/pkg/kubeconfig"
)

// Run starts everything and blocks until ctx ends or a part fails.
func Run(ctx context.Context, o Options) error {
	logger := klog.FromContext(ctx)
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "tangram-dra-controller"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the dynamic client: %w", err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	factory := informers.NewSharedInformerFactory(kube, 0)
	cluster := informer.FromFactory(factory)
	var gangs *gang.Controller
	var gangFactory dynamicinformer.DynamicSharedInformerFactory
	if o.GpuGangs {
		gangFactory = dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
		if gangs, err = gang.NewController(kube, dyn, factory, gangFactory, cluster, o.PendingResync); err != nil {
			return fmt.Errorf("setting up the GpuGang controller: %w", err)
		}
	}

	var listGangs func() ([]*tangramv1alpha1.GpuGang, error)
	if gangFactory != nil {
		listGangs = gang.DynamicGangs{Lister: gangFactory.ForResource(tangramv1alpha1.GroupVersionResource).Lister()}.List
	}
	registry, leader := metrics.NewRegistry(cluster, listGangs, logger)

	watchdog := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	ready := func() bool { return cluster.HasSynced() && (gangs == nil || gangs.HasSynced()) }
	errs := make(chan error, 4)
	if o.HealthzAddress != "" {
		go serve(ctx, errs, "health", o.HealthzAddress, healthMux(watchdog, ready), nil)
	}
	if o.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		go serve(ctx, errs, "metrics", o.MetricsAddress, mux, nil)
	}
	if o.WebhookAddress != "" {
		tlsConfig, err := webhookTLS(ctx, kube, o)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/validate", admission.Handler{})
		go serve(ctx, errs, "webhook", o.WebhookAddress, mux, tlsConfig)
	}

	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if gangFactory != nil {
		gangFactory.Start(ctx.Done())
		defer gangFactory.Shutdown()
	}

	go func() {
		select {
		case err := <-errs:
			cancel(err)
		case <-ctx.Done():
		}
	}()

	switch {
	case gangs == nil:
		leader.Set(1)
		<-ctx.Done()
	case !o.LeaderElect:
		leader.Set(1)
		if err := gangs.Run(ctx, o.Workers); err != nil && ctx.Err() == nil {
			return err
		}
	default:
		if err := runElected(ctx, cancel, kube, o, watchdog, leader, func(ctx context.Context) {
			if err := gangs.Run(ctx, o.Workers); err != nil && ctx.Err() == nil {
				cancel(err)
			}
		}); err != nil {
			return err
		}
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// runElected runs lead while this replica holds the Lease. Losing the
// Lease ends the process (cancel with an error): a fresh start is the
// simplest way to drop all state of the old term.
func runElected(ctx context.Context, cancel context.CancelCauseFunc, kube kubernetes.Interface, o Options,
	watchdog *leaderelection.HealthzAdaptor, leader prometheus.Gauge, lead func(context.Context)) error {
	logger := klog.FromContext(ctx)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.LeaderElectNamespace, o.LeaderElectName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: o.Identity})
	if err != nil {
		return fmt.Errorf("creating the leader election lock %s/%s: %w", o.LeaderElectNamespace, o.LeaderElectName, err)
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.LeaderElectName,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became leader", "identity", o.Identity)
				leader.Set(1)
				lead(ctx)
			},
			OnStoppedLeading: func() {
				leader.Set(0)
				if ctx.Err() == nil {
					cancel(fmt.Errorf("lost the leader Lease %s/%s", o.LeaderElectNamespace, o.LeaderElectName))
				}
			},
			OnNewLeader: func(identity string) {
				if identity != o.Identity {
					logger.Info("Another replica leads", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("setting up leader election: %w", err)
	}
	elector.Run(ctx)
	return nil
}

func healthMux(watchdog *leaderelection.HealthzAdaptor, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := watchdog.Check(r); err != nil {
			http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "informer caches are not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// serve runs one HTTP(S) server until ctx ends; a listen failure is
// reported on errs.
func serve(ctx context.Context, errs chan<- error, name, addr string, handler http.Handler, tlsConfig *tls.Config) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "server", name, "address", addr)
	srv := &http.Server{Addr: addr, Handler: handler, TLSConfig: tlsConfig, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(_ net.Listener) context.Context { return klog.NewContext(context.Background(), logger) }}
	go func() {
		<-ctx.Done()
		shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("Serving")
	var err error
	if tlsConfig != nil {
		err = srv.ListenAndServeTLS("", "")
	} else {
		err = srv.ListenAndServe()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs <- fmt.Errorf("%s server on %s: %w", name, addr, err)
	}
}

// webhookTLS loads the certificate from --webhook-cert-dir (reread on each
// handshake so rotated files are picked up), or keeps a self-signed one in
// a Secret shared by all replicas, renews it while running and writes its
// CA bundle into the webhook configuration (admission.CertRotator).
func webhookTLS(ctx context.Context, kube kubernetes.Interface, o Options) (*tls.Config, error) {
	if o.WebhookCertDir != "" {
		certFile, keyFile := filepath.Join(o.WebhookCertDir, "tls.crt"), filepath.Join(o.WebhookCertDir, "tls.key")
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("loading the webhook certificate from %s: %w", o.WebhookCertDir, err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("loading the webhook certificate from %s: %w", o.WebhookCertDir, err)
			}
			return &c, nil
		}}, nil
	}
	rotator := &admission.CertRotator{
		Kube:       kube,
		Secret:     admission.CertSecret{Namespace: o.WebhookNamespace, Name: o.WebhookSecret, Service: o.WebhookService},
		ConfigName: o.WebhookConfigName,
		Validity:   o.WebhookCertValidity,
	}
	// The first certificate must be there before the server starts; the
	// caBundle may wait (the configuration may be created after us, in the
	// same Helm release), Run retries it.
	if _, err := rotator.SyncCert(ctx); err != nil {
		return nil, err
	}
	go rotator.Run(ctx)
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: rotator.GetCertificate}, nil
}

func restConfig(path string) (*rest.Config, error) {
	cfg, _, err := kubeconfig.Load(kubeconfig.Options{Path: path, UserAgent: "tangram-dra-controller"})
	return cfg, err
}

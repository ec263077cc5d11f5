package admission

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Keys of the certificate Secret besides tls.crt and tls.key (the
// certificate served now, followed by its CA).
const (
	// caBundleKey holds every CA the API server must trust: the current
	// one, a staged successor, and predecessors until they expire.
	caBundleKey = "ca.crt"
	// nextCertKey and nextKeyKey hold the staged successor: its CA is
	// already in the bundle, it is served once stagedAtAnnotation is
	// StageFor old.
	nextCertKey = "next.crt"
	nextKeyKey  = "next.key"
	// stagedAtAnnotation is when the successor was staged (RFC 3339).
	stagedAtAnnotation = "tangram.dev/next-certificate-staged-at"
)

// Defaults of CertRotator.
const (
	DefaultCertValidity = 90 * 24 * time.Hour
	DefaultCertStageFor = 10 * time.Minute
	DefaultCertInterval = time.Minute
)

// CertSecret says where the self-managed certificate lives and for which
// Service it is.
type CertSecret struct {
	Namespace, Name string
	// Service is the webhook Service's name in Namespace.
	Service string
}

// hosts are the names the API server may use to reach the Service, plus
// loopback for a controller run as a host process.
func (s CertSecret) hosts() []string {
	svc := s.Service + "." + s.Namespace
	return []string{s.Service, svc, svc + ".svc", svc + ".svc.cluster.local", "localhost"}
}

// CertRotator keeps the webhook's serving certificate in a Secret that all
// replicas share, renews it while they run, and keeps the webhook
// configuration's caBundle equal to the Secret's ca.crt.
//
// Renewal is two-phase so that no replica ever serves a certificate the
// API server does not trust yet, whatever order the replicas act in:
// when a third of the certificate's validity is left, a new CA and
// certificate are staged (the new CA joins ca.crt, everyone keeps serving
// the old certificate); once the stage is StageFor old, every replica has
// written the new bundle (StageFor is several Intervals), and the staged
// certificate becomes the served one. The old CA stays in the bundle until
// it expires, so a replica that has not reread the Secret yet is still
// trusted. Every replica writes the bundle it read from the Secret, never
// one of its own making, so replicas no longer overwrite each other's.
// Writes to the Secret carry its resourceVersion: of two replicas renewing
// at once, one wins and the other takes its result.
type CertRotator struct {
	Kube   kubernetes.Interface
	Secret CertSecret
	// ConfigName is the ValidatingWebhookConfiguration whose caBundle is
	// set; empty leaves it alone.
	ConfigName string
	// Validity of each certificate and its CA. Default DefaultCertValidity.
	Validity time.Duration
	// StageFor is how long a new CA is trusted before its certificate is
	// served. It must be well above Interval. Default DefaultCertStageFor.
	StageFor time.Duration
	// Interval between two syncs of Run. Default DefaultCertInterval.
	Interval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time

	served atomic.Pointer[tls.Certificate]
}

func (r *CertRotator) defaults() {
	if r.Validity == 0 {
		r.Validity = DefaultCertValidity
	}
	if r.StageFor == 0 {
		r.StageFor = DefaultCertStageFor
	}
	if r.Interval == 0 {
		r.Interval = DefaultCertInterval
	}
	if r.Now == nil {
		r.Now = time.Now
	}
}

// GetCertificate serves the certificate of the last sync; use it as
// tls.Config.GetCertificate.
func (r *CertRotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.served.Load()
	if c == nil {
		return nil, errors.New("no webhook certificate loaded yet")
	}
	return c, nil
}

// Served returns the certificate the last sync loaded (nil before).
func (r *CertRotator) Served() *tls.Certificate { return r.served.Load() }

// SyncCert reads the Secret, renews or creates what is due, and loads the
// certificate to serve. The CA bundle it returns is the Secret's.
func (r *CertRotator) SyncCert(ctx context.Context) ([]byte, error) {
	r.defaults()
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(r.Secret.Namespace, r.Secret.Name))
	secrets := r.Kube.CoreV1().Secrets(r.Secret.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		current, err := secrets.Get(ctx, r.Secret.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			current = nil
		case err != nil:
			return nil, fmt.Errorf("reading webhook certificate Secret %s/%s: %w", r.Secret.Namespace, r.Secret.Name, err)
		}
		now := r.Now()
		want, reason, err := planCertSecret(current, r.Secret.hosts(), now, r.Validity, r.StageFor)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			want.Namespace, want.Name = r.Secret.Namespace, r.Secret.Name
			if current == nil {
				_, err = secrets.Create(ctx, want, metav1.CreateOptions{})
			} else {
				_, err = secrets.Update(ctx, want, metav1.UpdateOptions{})
			}
			switch {
			case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
				logger.V(2).Info("Another replica changed the webhook certificate first; rereading it")
				continue
			case err != nil:
				return nil, fmt.Errorf("storing the webhook certificate in Secret %s/%s (%s): %w", r.Secret.Namespace, r.Secret.Name, reason, err)
			}
			logger.Info("Changed the webhook certificate", "change", reason)
		}
		pair, err := loadPair(want.Data[corev1.TLSCertKey], want.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			// planCertSecret never returns a Secret that does not load.
			return nil, fmt.Errorf("loading the webhook certificate of Secret %s/%s: %w", r.Secret.Namespace, r.Secret.Name, err)
		}
		if old := r.served.Load(); old == nil || !bytes.Equal(old.Certificate[0], pair.Certificate[0]) {
			logger.Info("Serving the webhook certificate", "serial", pair.Leaf.SerialNumber.Text(16), "notAfter", pair.Leaf.NotAfter.Format(time.RFC3339))
		}
		r.served.Store(pair)
		return bytes.Clone(want.Data[caBundleKey]), nil
	}
	return nil, fmt.Errorf("storing the webhook certificate in Secret %s/%s: it kept changing under us", r.Secret.Namespace, r.Secret.Name)
}

// Sync is one round: SyncCert, then the caBundle of ConfigName.
func (r *CertRotator) Sync(ctx context.Context) error {
	bundle, err := r.SyncCert(ctx)
	if err != nil {
		return err
	}
	if r.ConfigName == "" {
		return nil
	}
	return InjectCABundle(ctx, r.Kube, r.ConfigName, bundle)
}

// Run syncs every Interval until ctx ends; after a failure (e.g. the
// webhook configuration is created after the controller, in the same Helm
// release) it retries every few seconds.
func (r *CertRotator) Run(ctx context.Context) {
	r.defaults()
	logger := klog.FromContext(ctx)
	for {
		interval := r.Interval
		if err := r.Sync(ctx); err != nil {
			interval = min(interval, 5*time.Second)
			logger.Error(err, "Syncing the webhook certificate; will retry", "in", interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// planCertSecret returns the Secret as it should be at now, and why it
// changed ("" when it should stay as it is; then the returned Secret is
// current). It is pure apart from generating keys.
func planCertSecret(current *corev1.Secret, hosts []string, now time.Time, validity, stageFor time.Duration) (*corev1.Secret, string, error) {
	if current == nil {
		s, err := freshCertSecret(nil, hosts, now, validity)
		return s, "created", err
	}
	served, problem := usablePair(current.Data[corev1.TLSCertKey], current.Data[corev1.TLSPrivateKeyKey], hosts, now)
	_, nextProblem := usablePair(current.Data[nextCertKey], current.Data[nextKeyKey], hosts, now)
	stagedAt, stagedErr := time.Parse(time.RFC3339, current.Annotations[stagedAtAnnotation])
	hasNext := nextProblem == "" && stagedErr == nil
	switch {
	case problem != "" && hasNext:
		// The served certificate cannot serve any more: the staged one is
		// the best there is, however briefly its CA has been trusted.
		return promote(current, now), "promoted the staged certificate early: the served one " + problem, nil
	case problem != "":
		s, err := freshCertSecret(current, hosts, now, validity)
		return s, "replaced: " + problem, err
	case hasNext && !now.Before(stagedAt.Add(stageFor)):
		return promote(current, now), "promoted the staged certificate", nil
	case hasNext:
		return current, "", nil
	case now.Add(validity / 3).After(served.Leaf.NotAfter):
		s, err := stageCertSecret(current, hosts, now, validity)
		return s, fmt.Sprintf("staged a successor: the served certificate expires at %s", served.Leaf.NotAfter.Format(time.RFC3339)), err
	case !bytes.Contains(current.Data[caBundleKey], caPEMOf(current.Data[corev1.TLSCertKey])):
		// A Secret of an older controller: no ca.crt yet.
		s := current.DeepCopy()
		s.Data[caBundleKey] = bundle(now, s.Data[caBundleKey], current.Data[corev1.TLSCertKey])
		return s, "added ca.crt", nil
	}
	return current, "", nil
}

// freshCertSecret is a new CA and certificate, served at once: for a new
// Secret, or one whose certificate cannot serve.
func freshCertSecret(current *corev1.Secret, hosts []string, now time.Time, validity time.Duration) (*corev1.Secret, error) {
	certPEM, keyPEM, err := newServingCert(hosts, now, validity)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{Type: corev1.SecretTypeTLS}
	if current != nil {
		s = current.DeepCopy()
	}
	var oldBundle []byte
	if s.Data != nil {
		oldBundle = s.Data[caBundleKey]
	}
	s.Data = map[string][]byte{
		corev1.TLSCertKey:       certPEM,
		corev1.TLSPrivateKeyKey: keyPEM,
		caBundleKey:             bundle(now, certPEM, oldBundle),
	}
	delete(s.Annotations, stagedAtAnnotation)
	return s, nil
}

// stageCertSecret adds a successor whose CA is trusted from now on.
func stageCertSecret(current *corev1.Secret, hosts []string, now time.Time, validity time.Duration) (*corev1.Secret, error) {
	certPEM, keyPEM, err := newServingCert(hosts, now, validity)
	if err != nil {
		return nil, err
	}
	s := current.DeepCopy()
	s.Data[nextCertKey], s.Data[nextKeyKey] = certPEM, keyPEM
	s.Data[caBundleKey] = bundle(now, certPEM, s.Data[caBundleKey], s.Data[corev1.TLSCertKey])
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[stagedAtAnnotation] = now.UTC().Format(time.RFC3339)
	return s, nil
}

// promote serves the staged certificate; the old CA stays in the bundle
// until it expires.
func promote(current *corev1.Secret, now time.Time) *corev1.Secret {
	s := current.DeepCopy()
	s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey] = s.Data[nextCertKey], s.Data[nextKeyKey]
	delete(s.Data, nextCertKey)
	delete(s.Data, nextKeyKey)
	s.Data[caBundleKey] = bundle(now, s.Data[caBundleKey], s.Data[corev1.TLSCertKey])
	delete(s.Annotations, stagedAtAnnotation)
	return s
}

// bundle returns the CA certificates found in the PEM inputs, in order,
// without duplicates and without expired ones.
func bundle(now time.Time, pems ...[]byte) []byte {
	var out bytes.Buffer
	var seen [][]byte
	for _, p := range pems {
		for {
			var block *pem.Block
			block, p = pem.Decode(p)
			if block == nil {
				break
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil || !c.IsCA || now.After(c.NotAfter) ||
				slices.ContainsFunc(seen, func(b []byte) bool { return bytes.Equal(b, block.Bytes) }) {
				continue
			}
			seen = append(seen, block.Bytes)
			_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})
		}
	}
	return out.Bytes()
}

// caPEMOf is the CA of a served chain (its CA certificates) as PEM.
func caPEMOf(chain []byte) []byte { return bundle(time.Time{}, chain) }

// usablePair loads a certificate and key, or says why they cannot serve.
func usablePair(certPEM, keyPEM []byte, hosts []string, now time.Time) (*tls.Certificate, string) {
	if len(certPEM) == 0 {
		return nil, "is missing"
	}
	pair, err := loadPair(certPEM, keyPEM)
	if err != nil {
		return nil, err.Error()
	}
	leaf := pair.Leaf
	if !now.Before(leaf.NotAfter) {
		return nil, fmt.Sprintf("expired at %s", leaf.NotAfter.Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Sprintf("is not valid before %s", leaf.NotBefore.Format(time.RFC3339))
	}
	for _, h := range hosts {
		if !slices.Contains(leaf.DNSNames, h) {
			return nil, fmt.Sprintf("is not valid for %s", h)
		}
	}
	return pair, ""
}

// loadPair loads a PEM chain (serving certificate first, then its CA) and
// key.
func loadPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("does not load: %w", err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("does not parse: %w", err)
		}
	}
	return &pair, nil
}

// newServingCert makes a CA and a serving certificate for hosts (and
// 127.0.0.1) signed by it, both valid from a minute before now (clock
// skew) for validity. The CA's key is not kept: each renewal makes a new
// CA, so a leaked key of an old one signs nothing once it leaves the
// bundle. It returns the chain (certificate, CA) and the key as PEM.
func newServingCert(hosts []string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	notBefore, notAfter := now.Add(-time.Minute), now.Add(validity)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the webhook CA key: %w", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s-ca@%d", hosts[0], now.Unix())},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the webhook CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the webhook CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the webhook key: %w", err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[2]},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     hosts,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the webhook certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the webhook key: %w", err)
	}
	var chain bytes.Buffer
	_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return chain.Bytes(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would only
		// make two certificates look alike in logs.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// InjectCABundle writes the CA bundle into every webhook of the
// ValidatingWebhookConfiguration (the chart creates it without one).
func InjectCABundle(ctx context.Context, kube kubernetes.Interface, configName string, caBundle []byte) error {
	configs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cfg, err := configs.Get(ctx, configName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s to set its caBundle: %w", configName, err)
	}
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caBundle) {
			cfg.Webhooks[i].ClientConfig.CABundle = caBundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if _, err := configs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the caBundle of ValidatingWebhookConfiguration %s: %w", configName, err)
	}
	klog.FromContext(ctx).Info("Set the webhook CA bundle", "config", configName)
	return nil
}

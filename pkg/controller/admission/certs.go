package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// renewBefore is how long before expiry a stored certificate is replaced
// (at controller start; certificates last a year).
const renewBefore = 30 * 24 * time.Hour

// ServingCert is the webhook's certificate and the CA bundle the API
// server must trust.
type ServingCert struct {
	Cert     tls.Certificate
	CABundle []byte
}

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

// EnsureServingCert reads the certificate from the Secret, or generates a
// self-signed one and stores it there. Replicas racing to create the Secret
// all end up with the first one's certificate.
func EnsureServingCert(ctx context.Context, kube kubernetes.Interface, s CertSecret, now time.Time) (*ServingCert, error) {
	logger := klog.FromContext(ctx)
	secrets := kube.CoreV1().Secrets(s.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		var current *corev1.Secret
		existing, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			current = existing
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading webhook certificate Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		if current != nil {
			sc, problem := usable(current, s.hosts(), now)
			if problem == "" {
				return sc, nil
			}
			logger.Info("Replacing the webhook certificate", "secret", s.Name, "reason", problem)
		}
		certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(s.hosts()[2], []net.IP{net.ParseIP("127.0.0.1")}, s.hosts())
		if err != nil {
			return nil, fmt.Errorf("generating the webhook certificate: %w", err)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
		}
		if current != nil {
			secret.ObjectMeta = *current.ObjectMeta.DeepCopy()
			_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
		} else {
			_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		}
		switch {
		case err == nil:
			return parse(certPEM, keyPEM)
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			continue // another replica was faster; use its certificate
		default:
			return nil, fmt.Errorf("storing the webhook certificate in Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil, fmt.Errorf("storing the webhook certificate in Secret %s/%s: it kept changing under us", s.Namespace, s.Name)
}

// usable returns the Secret's certificate, or why it cannot serve.
func usable(secret *corev1.Secret, hosts []string, now time.Time) (*ServingCert, string) {
	sc, err := parse(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, err.Error()
	}
	leaf := sc.Cert.Leaf
	if now.Add(renewBefore).After(leaf.NotAfter) {
		return nil, fmt.Sprintf("it expires at %s", leaf.NotAfter.Format(time.RFC3339))
	}
	for _, h := range hosts {
		if !slices.Contains(leaf.DNSNames, h) {
			return nil, fmt.Sprintf("it is not valid for %s", h)
		}
	}
	return sc, ""
}

// parse loads a PEM chain (serving certificate first, then its CA, as
// cert.GenerateSelfSignedCertKey writes it) and key. The whole chain is the
// CA bundle: the API server trusts the CA in it.
func parse(certPEM, keyPEM []byte) (*ServingCert, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the stored certificate does not load: %w", err)
	}
	if pair.Leaf == nil {
		block, _ := pem.Decode(certPEM)
		if block == nil {
			return nil, fmt.Errorf("the stored certificate has no PEM block")
		}
		if pair.Leaf, err = x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("parsing the stored certificate: %w", err)
		}
	}
	return &ServingCert{Cert: pair, CABundle: bytes.Clone(certPEM)}, nil
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

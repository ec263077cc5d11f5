package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var testSecret = CertSecret{Namespace: "tangram", Name: "tangram-controller-webhook-tls", Service: "tangram-controller-webhook"}

func TestEnsureServingCertCreatesAndReuses(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	now := time.Now()
	first, err := EnsureServingCert(ctx, kube, testSecret, now)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := kube.CoreV1().Secrets("tangram").Get(ctx, testSecret.Name, metav1.GetOptions{})
	if err != nil || secret.Type != corev1.SecretTypeTLS {
		t.Fatalf("secret %+v, %v", secret, err)
	}
	// A second replica (or a restart) uses the stored certificate.
	second, err := EnsureServingCert(ctx, kube, testSecret, now)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.CABundle, second.CABundle) {
		t.Error("the second call made a new certificate instead of reusing the stored one")
	}
	// Close to expiry it is replaced in place.
	third, err := EnsureServingCert(ctx, kube, testSecret, now.Add(340*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first.CABundle, third.CABundle) {
		t.Error("a certificate expiring within 30 days was kept")
	}

	// The API server reaches the Service by its DNS name and trusts the bundle.
	srv := httptest.NewUnstartedServer(Handler{})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{third.Cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(third.CABundle) {
		t.Fatal("CA bundle has no certificate")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "tangram-controller-webhook.tangram.svc", MinVersion: tls.VersionTLS12}}}
	resp, err := client.Post(srv.URL, "application/json", strings.NewReader(review("resourceclaims", "ResourceClaim", "CREATE", claimJSON())))
	if err != nil {
		t.Fatalf("TLS request with the CA bundle: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTP %d", resp.StatusCode)
	}
}

func TestEnsureServingCertReplacesGarbage(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tangram", Name: testSecret.Name},
		Data:       map[string][]byte{corev1.TLSCertKey: []byte("junk"), corev1.TLSPrivateKeyKey: []byte("junk")},
	})
	sc, err := EnsureServingCert(ctx, kube, testSecret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := kube.CoreV1().Secrets("tangram").Get(ctx, testSecret.Name, metav1.GetOptions{})
	if !bytes.Equal(secret.Data[corev1.TLSCertKey], sc.CABundle) {
		t.Error("the unusable Secret was not replaced with the new certificate")
	}
	if !strings.Contains(strings.Join(sc.Cert.Leaf.DNSNames, ","), "tangram-controller-webhook.tangram.svc") {
		t.Errorf("DNS names %v", sc.Cert.Leaf.DNSNames)
	}
}

func TestInjectCABundle(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(&admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tangram-gpuconfig"},
		Webhooks:   []admissionregv1.ValidatingWebhook{{Name: "gpuconfig.tangram.dev"}, {Name: "other.tangram.dev"}},
	})
	if err := InjectCABundle(ctx, kube, "tangram-gpuconfig", []byte("CA")); err != nil {
		t.Fatal(err)
	}
	cfg, _ := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tangram-gpuconfig", metav1.GetOptions{})
	for _, w := range cfg.Webhooks {
		if string(w.ClientConfig.CABundle) != "CA" {
			t.Errorf("webhook %s caBundle %q", w.Name, w.ClientConfig.CABundle)
		}
	}
	kube.ClearActions()
	if err := InjectCABundle(ctx, kube, "tangram-gpuconfig", []byte("CA")); err != nil {
		t.Fatal(err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "update" {
			t.Error("an unchanged bundle was written again")
		}
	}
	if err := InjectCABundle(ctx, kube, "missing", []byte("CA")); err == nil || !strings.Contains(err.Error(), "ValidatingWebhookConfiguration missing") {
		t.Errorf("err = %v", err)
	}
}

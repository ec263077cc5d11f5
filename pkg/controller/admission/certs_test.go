package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/cert"
)

var testSecret = CertSecret{Namespace: "tangram", Name: "tangram-controller-webhook-tls", Service: "tangram-controller-webhook"}

// verifyServed checks what the API server checks: the served chain leads
// to a CA of the bundle, for the Service's DNS name, at now.
func verifyServed(t *testing.T, served *tls.Certificate, caBundle []byte, now time.Time) error {
	t.Helper()
	if served == nil {
		return errors.New("no certificate served")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return fmt.Errorf("CA bundle %q has no certificate", caBundle)
	}
	leaf, err := x509.ParseCertificate(served.Certificate[0])
	if err != nil {
		return err
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "tangram-controller-webhook.tangram.svc", CurrentTime: now})
	return err
}

func webhookConfig() *admissionregv1.ValidatingWebhookConfiguration {
	return &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tangram-gpuconfig"},
		Webhooks:   []admissionregv1.ValidatingWebhook{{Name: "gpuconfig.tangram.dev"}},
	}
}

func configBundle(ctx context.Context, t *testing.T, kube *fake.Clientset) []byte {
	t.Helper()
	cfg, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tangram-gpuconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Webhooks[0].ClientConfig.CABundle
}

func TestCertRotatorCreatesAndReuses(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(webhookConfig())
	now := time.Now().Truncate(time.Second) // certificates keep whole seconds
	clock := func() time.Time { return now }
	first := &CertRotator{Kube: kube, Secret: testSecret, ConfigName: "tangram-gpuconfig", Now: clock}
	if err := first.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	secret, err := kube.CoreV1().Secrets("tangram").Get(ctx, testSecret.Name, metav1.GetOptions{})
	if err != nil || secret.Type != corev1.SecretTypeTLS {
		t.Fatalf("secret %+v, %v", secret, err)
	}
	if got := first.Served().Leaf.NotAfter.Sub(now); got != DefaultCertValidity {
		t.Errorf("certificate valid for %v, want %v", got, DefaultCertValidity)
	}
	// A second replica (or a restart) serves the stored certificate.
	second := &CertRotator{Kube: kube, Secret: testSecret, ConfigName: "tangram-gpuconfig", Now: clock}
	if err := second.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Served().Certificate[0], second.Served().Certificate[0]) {
		t.Error("the second replica made a certificate of its own instead of using the stored one")
	}

	// The API server reaches the Service by its DNS name and trusts the bundle.
	srv := httptest.NewUnstartedServer(Handler{})
	srv.TLS = &tls.Config{GetCertificate: second.GetCertificate, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(configBundle(ctx, t, kube)) {
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

// TestCertRotatorRenewsWhileRunning runs three replicas for three
// certificate lifetimes without a restart: one syncs every minute, one
// every two, one every three, in changing order. After every sync, every
// replica's certificate must be trusted by the caBundle the API server has
// at that moment, and none may be expired.
func TestCertRotatorRenewsWhileRunning(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset(webhookConfig())
	const validity = 6 * time.Hour
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	replicas := make([]*CertRotator, 3)
	for i := range replicas {
		replicas[i] = &CertRotator{Kube: kube, Secret: testSecret, ConfigName: "tangram-gpuconfig",
			Validity: validity, StageFor: 10 * time.Minute, Interval: time.Minute, Now: clock}
	}
	serials := map[string]bool{}
	for minute := 0; minute <= int(3*validity/time.Minute); minute++ {
		now = start.Add(time.Duration(minute) * time.Minute)
		for k := range replicas {
			i := (k + minute) % len(replicas)
			if minute%(i+1) != 0 {
				continue
			}
			if err := replicas[i].Sync(ctx); err != nil {
				t.Fatalf("minute %d, replica %d: %v", minute, i, err)
			}
			bundle := configBundle(ctx, t, kube)
			for j, r := range replicas {
				if r.Served() == nil {
					continue // not started yet
				}
				if err := verifyServed(t, r.Served(), bundle, now); err != nil {
					t.Fatalf("minute %d, after replica %d synced: replica %d's certificate is not trusted by the caBundle: %v", minute, i, j, err)
				}
			}
			serials[replicas[i].Served().Leaf.SerialNumber.String()] = true
		}
	}
	// Renewed when a third is left: at 4h, 8h, 12h, 16h (plus StageFor).
	if len(serials) < 4 {
		t.Errorf("served %d certificates in three lifetimes, want at least 4 (renewed while running)", len(serials))
	}
	secret, _ := kube.CoreV1().Secrets("tangram").Get(ctx, testSecret.Name, metav1.GetOptions{})
	if n := bytes.Count(secret.Data[caBundleKey], []byte("BEGIN CERTIFICATE")); n > 3 {
		t.Errorf("the CA bundle holds %d CAs; expired ones must be dropped", n)
	}
}

func TestPlanCertSecret(t *testing.T) {
	hosts := testSecret.hosts()
	// The wall clock: cert.GenerateSelfSignedCertKey (the older
	// controller's Secret) dates its certificate by it.
	now := time.Now()
	const validity, stageFor = 90 * time.Hour, 10 * time.Minute
	fresh, _, err := planCertSecret(nil, hosts, now, validity, stageFor)
	if err != nil {
		t.Fatal(err)
	}
	staged, reason, err := planCertSecret(fresh, hosts, now.Add(61*time.Hour), validity, stageFor)
	if err != nil || !strings.HasPrefix(reason, "staged a successor") {
		t.Fatalf("two thirds into the validity: %q, %v", reason, err)
	}
	legacyCert, legacyKey, err := cert.GenerateSelfSignedCertKey(hosts[2], nil, hosts)
	if err != nil {
		t.Fatal(err)
	}
	otherHosts := CertSecret{Namespace: "tangram", Name: "x", Service: "other"}.hosts()
	otherCert, otherKey, err := newServingCert(otherHosts, now, validity)
	if err != nil {
		t.Fatal(err)
	}
	secretWith := func(data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tangram", Name: testSecret.Name, ResourceVersion: "7"}, Data: data}
	}
	for _, tc := range []struct {
		name    string
		current *corev1.Secret
		at      time.Duration
		// wantReason is a prefix; "" means unchanged.
		wantReason string
		// wantServed: "current", "next" (the staged one) or "new".
		wantServed string
		// wantStaged: a successor is staged afterwards.
		wantStaged bool
	}{
		{name: "fresh, early", current: fresh, at: time.Hour, wantServed: "current"},
		{name: "fresh, a third left", current: fresh, at: 61 * time.Hour, wantReason: "staged a successor", wantServed: "current", wantStaged: true},
		{name: "staged, not long enough", current: staged, at: 61*time.Hour + 9*time.Minute, wantServed: "current", wantStaged: true},
		{name: "staged long enough", current: staged, at: 61*time.Hour + 10*time.Minute, wantReason: "promoted the staged certificate", wantServed: "next"},
		{name: "staged, served one expired", current: staged, at: 91 * time.Hour, wantReason: "promoted the staged certificate early", wantServed: "next"},
		{name: "garbage", current: secretWith(map[string][]byte{"tls.crt": []byte("junk"), "tls.key": []byte("junk")}), wantReason: "replaced: does not load", wantServed: "new"},
		{name: "wrong names", current: secretWith(map[string][]byte{"tls.crt": otherCert, "tls.key": otherKey}), wantReason: "replaced: is not valid for tangram-controller-webhook", wantServed: "new"},
		{name: "older controller's Secret: ca.crt added, same certificate", current: secretWith(map[string][]byte{"tls.crt": legacyCert, "tls.key": legacyKey}), wantReason: "added ca.crt", wantServed: "current"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := now.Add(tc.at)
			got, reason, err := planCertSecret(tc.current, hosts, at, validity, stageFor)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.wantReason == "") != (reason == "") || !strings.HasPrefix(reason, tc.wantReason) {
				t.Fatalf("reason %q, want %q", reason, tc.wantReason)
			}
			if reason != "" && got.ResourceVersion != tc.current.ResourceVersion {
				t.Errorf("resourceVersion %q, want the current %q (the update must fail on a concurrent change)", got.ResourceVersion, tc.current.ResourceVersion)
			}
			servedPEM := got.Data[corev1.TLSCertKey]
			switch tc.wantServed {
			case "current":
				if !bytes.Equal(servedPEM, tc.current.Data[corev1.TLSCertKey]) {
					t.Error("the served certificate changed")
				}
			case "next":
				if !bytes.Equal(servedPEM, tc.current.Data[nextCertKey]) {
					t.Error("the staged certificate is not the served one")
				}
			case "new":
				if bytes.Equal(servedPEM, tc.current.Data[corev1.TLSCertKey]) {
					t.Error("the unusable certificate was kept")
				}
			}
			if staged := len(got.Data[nextCertKey]) > 0 && got.Annotations[stagedAtAnnotation] != ""; staged != tc.wantStaged {
				t.Errorf("staged successor = %v, want %v", staged, tc.wantStaged)
			}
			pair, err := loadPair(servedPEM, got.Data[corev1.TLSPrivateKeyKey])
			if err != nil {
				t.Fatal(err)
			}
			if err := verifyServed(t, pair, got.Data[caBundleKey], at); err != nil {
				t.Errorf("served certificate not trusted by ca.crt: %v", err)
			}
			if tc.wantStaged {
				next, err := loadPair(got.Data[nextCertKey], got.Data[nextKeyKey])
				if err != nil {
					t.Fatal(err)
				}
				if err := verifyServed(t, next, got.Data[caBundleKey], at); err != nil {
					t.Errorf("staged certificate not trusted by ca.crt: %v", err)
				}
			}
		})
	}
}

// TestCertRotatorConcurrentRenewal: of two replicas creating the Secret at
// once, the one whose create fails takes the other's certificate.
func TestCertRotatorConcurrentRenewal(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	now := time.Now()
	winners, _, err := planCertSecret(nil, testSecret.hosts(), now, DefaultCertValidity, DefaultCertStageFor)
	if err != nil {
		t.Fatal(err)
	}
	winners.Namespace, winners.Name = testSecret.Namespace, testSecret.Name
	// Between the loser's read and its create, the other replica stores
	// its Secret.
	raced := false
	kube.PrependReactor("create", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		if err := kube.Tracker().Add(winners); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), testSecret.Name)
	})
	loser := &CertRotator{Kube: kube, Secret: testSecret, Now: func() time.Time { return now }}
	if _, err := loser.SyncCert(ctx); err != nil {
		t.Fatal(err)
	}
	if !raced {
		t.Fatal("the race was not staged")
	}
	pair, err := loadPair(winners.Data[corev1.TLSCertKey], winners.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pair.Certificate[0], loser.Served().Certificate[0]) {
		t.Error("the replica that lost the race serves a certificate of its own")
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

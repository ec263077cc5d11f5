package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/leaderelection"
)

func TestOptionsFlagsAndValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		err  string
	}{
		{name: "chart arguments", args: []string{"--leader-elect=true", "--leader-elect-namespace=tangram", "--healthz-address=:51516", "--metrics-address=", "--v=2"}},
		{name: "namespace from the pod", args: []string{"--leader-elect"}, env: map[string]string{"POD_NAMESPACE": "tangram", "POD_NAME": "ctl-0"}},
		{name: "leader election without namespace", args: []string{"--leader-elect"}, env: map[string]string{"POD_NAMESPACE": ""},
			err: "--leader-elect needs --leader-elect-namespace or $POD_NAMESPACE"},
		{name: "bad timings and workers", args: []string{"--leader-elect", "--leader-elect-namespace=x", "--leader-elect-renew-deadline=20s", "--workers=0"},
			err: "leader election needs retry period (2s) < renew deadline (20s) < lease duration (15s)\n--workers is 0; it must be at least 1"},
		{name: "a negative retry period", args: []string{"--leader-elect", "--leader-elect-namespace=x", "--identity=a", "--leader-elect-retry-period=-1s"},
			err: "--leader-elect-retry-period is -1s; it must be positive"},
		{name: "self-managed webhook certificate needs a namespace", args: []string{"--webhook-address=:9443"}, env: map[string]string{"POD_NAMESPACE": ""},
			err: "a self-managed webhook certificate needs --webhook-namespace or $POD_NAMESPACE (or pass --webhook-cert-dir)"},
		{name: "webhook certificate validity too short", args: []string{"--webhook-address=:9443", "--webhook-namespace=tangram", "--webhook-cert-validity=30m"},
			err: "--webhook-cert-validity is 30m0s; it must be at least 1h (renewal stages a new CA 10m0s before serving its certificate)"},
		{name: "webhook with cert dir", args: []string{"--webhook-address=:9443", "--webhook-cert-dir=/certs"}, env: map[string]string{"POD_NAMESPACE": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var o Options
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			fs.Int("v", 0, "klog verbosity, registered by main")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o.Complete()
			err := o.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || err.Error() != tc.err):
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

func TestHealthEndpoints(t *testing.T) {
	var synced atomic.Bool
	srv := httptest.NewServer(healthMux(leaderelection.NewLeaderHealthzAdaptor(time.Second), synced.Load))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d before any election", code)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not synced") {
		t.Errorf("/readyz %d %q before sync", code, body)
	}
	synced.Store(true)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz %d after sync", code)
	}
}

func TestRestConfigWithoutCluster(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // no ~/.kube/config
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := restConfig(""); err == nil || !strings.Contains(err.Error(), "pass --kubeconfig") {
		t.Errorf("err = %v", err)
	}
	if _, err := restConfig("/does/not/exist"); err == nil || !strings.Contains(err.Error(), "loading kubeconfig /does/not/exist") {
		t.Errorf("err = %v", err)
	}
}

package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://file.example:6443"}
- name: other
  cluster: {server: "https://other.example:6443"}
contexts:
- name: c
  context: {cluster: c, user: u, namespace: team-a}
- name: other
  context: {cluster: other, user: u}
current-context: c
users:
- name: u
  user: {token: t}
`

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// No ~/.kube/config and no service account: only what the test names.
	t.Setenv("HOME", dir)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")

	tests := []struct {
		name       string
		env        string
		opts       Options
		wantServer string
		wantNS     string
		wantErr    string
	}{
		{name: "explicit path", opts: Options{Path: path, UserAgent: "ua"}, wantServer: "https://file.example:6443", wantNS: "team-a"},
		{name: "KUBECONFIG", env: path, wantServer: "https://file.example:6443", wantNS: "team-a"},
		{name: "context override", opts: Options{Path: path, Overrides: &clientcmd.ConfigOverrides{CurrentContext: "other"}},
			wantServer: "https://other.example:6443", wantNS: "default"},
		{name: "missing explicit file", opts: Options{Path: filepath.Join(dir, "nope")}, wantErr: "loading kubeconfig " + filepath.Join(dir, "nope")},
		{name: "nothing configured", wantErr: "pass --kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			cfg, ns, err := Load(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(): %v", err)
			}
			if cfg.Host != tc.wantServer || ns != tc.wantNS || cfg.UserAgent != tc.opts.UserAgent {
				t.Errorf("Load() = host %q, namespace %q, user agent %q; want %q, %q, %q", cfg.Host, ns, cfg.UserAgent, tc.wantServer, tc.wantNS, tc.opts.UserAgent)
			}
		})
	}
}

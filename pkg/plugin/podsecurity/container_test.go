package podsecurity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckBundle is the create hook's decision on a container joining a
// strict share, from its OCI runtime config: only a non-root container
// that cannot gain privileges starts; anything the hook cannot read
// refuses it (fail closed), with a message naming the claim, the class and
// what to set.
func TestCheckBundle(t *testing.T) {
	const (
		claimName  = "team/share"
		id         = "0123abcd"
		containerd = `"annotations":{"io.kubernetes.cri.sandbox-namespace":"team","io.kubernetes.cri.sandbox-name":"late","io.kubernetes.cri.container-name":"cuda"}`
		crio       = `"annotations":{"io.kubernetes.pod.namespace":"team","io.kubernetes.pod.name":"late","io.kubernetes.container.name":"cuda"}`
	)
	fix := " (claim team/share), whose isolation relies on its MPS clients being unprivileged: set securityContext.runAsNonRoot: true with a non-zero runAsUser"
	tests := []struct {
		name string
		// config is written as the bundle's config.json; "-" writes none.
		config string
		// want is "" for a container that may start, else substrings of
		// the error.
		want []string
		// refused: the error is a ContainerRefusedError (the container,
		// not the check, is at fault).
		refused bool
	}{
		{name: "uid 1000, no new privileges", config: `{"process":{"user":{"uid":1000,"gid":1000},"noNewPrivileges":true},` + containerd + `}`},
		{name: "uid 65534, gid 0, no new privileges", config: `{"process":{"user":{"uid":65534},"noNewPrivileges":true}}`},
		{name: "uid 0", config: `{"process":{"user":{"uid":0,"gid":0},"noNewPrivileges":true},` + containerd + `}`, refused: true,
			want: []string{`pod team/late container "cuda" would run as uid 0 (root) on a share of class hard-shared-gpu.tangram.dev` + fix, "allowPrivilegeEscalation: false", "recreate the pod"}},
		{name: "uid 0 under CRI-O", config: `{"process":{"user":{"uid":0},"noNewPrivileges":true},` + crio + `}`, refused: true,
			want: []string{`pod team/late container "cuda" would run as uid 0 (root)`}},
		{name: "missing user is root", config: `{"process":{"noNewPrivileges":true,"args":["sh"]}}`, refused: true,
			want: []string{"container 0123abcd would run as uid 0 (root)" + " on a share of class hard-shared-gpu.tangram.dev" + fix}},
		{name: "uid 1000 that may gain privileges", config: `{"process":{"user":{"uid":1000}},` + containerd + `}`, refused: true,
			want: []string{`pod team/late container "cuda" may gain privileges (noNewPrivileges is not set: allowPrivilegeEscalation is not false) on a share`}},
		{name: "root that may gain privileges", config: `{"process":{"user":{"uid":0}}}`, refused: true,
			want: []string{"would run as uid 0 (root) and may gain privileges"}},
		{name: "no process", config: `{"ociVersion":"1.2.0"}`,
			want: []string{"container 0123abcd: its OCI runtime config has no process", "claim team/share", "refusing it"}},
		{name: "config not JSON", config: `{"process":`,
			want: []string{"container 0123abcd: reading its OCI runtime config to check that it runs as non-root on a share of class hard-shared-gpu.tangram.dev (claim team/share)", "refusing it"}},
		{name: "config unreadable", config: "-",
			want: []string{"container 0123abcd: reading its OCI runtime config", "config.json", "no such file or directory", "refusing it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bundle := t.TempDir()
			if tt.config != "-" {
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckBundle(bundle, id, claimName, strict)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused a locked-down container: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("started the container; want it refused with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
			var refused *ContainerRefusedError
			if errors.As(err, &refused) != tt.refused {
				t.Errorf("error is a ContainerRefusedError: %v, want %v", !tt.refused, tt.refused)
			}
		})
	}
}

func TestCheckBundleWithoutBundle(t *testing.T) {
	err := CheckBundle("", "0123abcd", "team/share", strict)
	if err == nil || !strings.Contains(err.Error(), "names no bundle") || !strings.Contains(err.Error(), "refusing it") {
		t.Fatalf("CheckBundle with no bundle: %v; want a refusal saying the OCI state names no bundle", err)
	}
}

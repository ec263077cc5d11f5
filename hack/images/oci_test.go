// Package images holds the test of build-oci.sh, the registry-free image
// builder: the archive it writes must be a consistent OCI image layout that
// containerd can import under the requested name.
package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    map[string]string `json:"platform"`
}

// readTar returns the regular files of a tar archive by name, and their modes.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		files[name], modes[name] = data, h.Mode
	}
}

func blob(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	data, ok := files["blobs/sha256/"+hexDigest]
	if !ok {
		t.Fatalf("blob %s missing from the archive", digest)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != hexDigest {
		t.Fatalf("blob %s has content digest %s", digest, got)
	}
	return data
}

func TestBuildOCI(t *testing.T) {
	dir := t.TempDir()
	binary := filepath.Join(dir, "gpu-info")
	if err := os.WriteFile(binary, []byte("not really a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		ref        string
		binary     string
		entrypoint string // argument; empty = default
		wantEntry  string
		wantErr    string
	}{
		{name: "default entrypoint", ref: "localhost/tangram/gpu-info:dev", binary: binary, wantEntry: "/gpu-info"},
		{name: "explicit entrypoint", ref: "registry.k8s.io/pause:3.10", binary: binary, entrypoint: "/bin/pause", wantEntry: "/bin/pause"},
		{name: "no tag", ref: "localhost/tangram/gpu-info", binary: binary, wantErr: "needs a tag"},
		{name: "missing binary", ref: "x/y:z", binary: filepath.Join(dir, "nope"), wantErr: "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "image.tar")
			args := []string{"build-oci.sh", tc.ref, tc.binary, out}
			if tc.entrypoint != "" {
				args = append(args, tc.entrypoint)
			}
			cmd := exec.Command("bash", args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(stderr.String(), tc.wantErr) {
					t.Fatalf("want failure mentioning %q, got err=%v stderr=%q", tc.wantErr, err, stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("build-oci.sh failed: %v\n%s", err, stderr.String())
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			files, _ := readTar(t, f)
			if got := string(files["oci-layout"]); !strings.Contains(got, `"imageLayoutVersion":"1.0.0"`) {
				t.Errorf("oci-layout = %q", got)
			}

			var index struct{ Manifests []descriptor }
			if err := json.Unmarshal(files["index.json"], &index); err != nil {
				t.Fatalf("index.json: %v", err)
			}
			if len(index.Manifests) != 1 {
				t.Fatalf("index has %d manifests, want 1", len(index.Manifests))
			}
			m := index.Manifests[0]
			if m.Annotations["io.containerd.image.name"] != tc.ref {
				t.Errorf("image name annotation = %q, want %q", m.Annotations["io.containerd.image.name"], tc.ref)
			}
			if m.Platform["os"] != "linux" || m.Platform["architecture"] != "amd64" {
				t.Errorf("platform = %v", m.Platform)
			}

			var manifest struct {
				Config descriptor
				Layers []descriptor
			}
			if err := json.Unmarshal(blob(t, files, m.Digest), &manifest); err != nil {
				t.Fatalf("manifest: %v", err)
			}
			if len(manifest.Layers) != 1 {
				t.Fatalf("manifest has %d layers, want 1", len(manifest.Layers))
			}
			var config struct {
				Config struct{ Entrypoint []string }
				RootFS struct {
					DiffIDs []string `json:"diff_ids"`
				} `json:"rootfs"`
			}
			if err := json.Unmarshal(blob(t, files, manifest.Config.Digest), &config); err != nil {
				t.Fatalf("config: %v", err)
			}
			if len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != tc.wantEntry {
				t.Errorf("entrypoint = %v, want [%s]", config.Config.Entrypoint, tc.wantEntry)
			}
			// An uncompressed layer's digest is its diff ID.
			if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
				t.Errorf("diff_ids = %v, want [%s]", config.RootFS.DiffIDs, manifest.Layers[0].Digest)
			}

			layer, modes := readTar(t, bytes.NewReader(blob(t, files, manifest.Layers[0].Digest)))
			entry := strings.TrimPrefix(tc.wantEntry, "/")
			if string(layer[entry]) != "not really a program" {
				t.Errorf("layer file %s = %q", entry, layer[entry])
			}
			if modes[entry]&0o111 == 0 {
				t.Errorf("layer file %s is not executable (mode %o)", entry, modes[entry])
			}
		})
	}
}

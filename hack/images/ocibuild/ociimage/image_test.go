package ociimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const testRef = "localhost/tangram/dra-kubelet-plugin:dev"

var (
	baseTree = []file{
		{path: "lib64", dir: true, mode: 0o755},
		{path: "lib64/ld-linux-x86-64.so.2", content: "loader", mode: 0o755},
	}
	appTree = []file{
		{path: "dra-kubelet-plugin", content: "program", mode: 0o755},
		{path: "etc", dir: true, mode: 0o755},
		{path: "etc/passwd", content: "root:x:0:0:root:/:/nonexistent\n", mode: 0o644},
	}
)

// buildArchive stages the two trees in fresh directories (created now, in the
// given order) and writes the archive; it returns the digest and the bytes.
func buildArchive(t *testing.T, base, app []file, epoch time.Time) (v1.Hash, []byte) {
	t.Helper()
	baseDir, appDir := t.TempDir(), t.TempDir()
	writeTree(t, baseDir, base, time.Now())
	writeTree(t, appDir, app, time.Now())
	img, err := Build(Spec{
		Layers:       []Layer{{Dir: baseDir, CreatedBy: "debian libc6"}, {Dir: appDir, CreatedBy: "go build"}},
		Entrypoint:   []string{"/dra-kubelet-plugin"},
		Env:          []string{"PATH=/usr/bin:/bin:/"},
		WorkingDir:   "/",
		Labels:       map[string]string{"org.opencontainers.image.title": "dra-kubelet-plugin"},
		Created:      epoch,
		OS:           "linux",
		Architecture: "amd64",
	})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	digest, err := WriteArchive(img, testRef, out, epoch)
	if err != nil {
		t.Fatalf("WriteArchive: %v", err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return digest, data
}

func TestTwoBuildsGiveTheSameDigest(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	digest, archive := buildArchive(t, baseTree, appTree, epoch)

	changedApp := append([]file(nil), appTree...)
	changedApp[0].content = "program v2"
	tests := []struct {
		name     string
		base     []file
		app      []file
		epoch    time.Time
		wantSame bool
	}{
		{name: "same inputs staged again in another order", base: reversed(baseTree), app: reversed(appTree), epoch: epoch, wantSame: true},
		{name: "another binary", base: baseTree, app: changedApp, epoch: epoch},
		{name: "another SOURCE_DATE_EPOCH", base: baseTree, app: appTree, epoch: epoch.Add(time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, a := buildArchive(t, tc.base, tc.app, tc.epoch)
			if (d == digest) != tc.wantSame {
				t.Errorf("digest %s vs %s: same = %v, want %v", d, digest, d == digest, tc.wantSame)
			}
			if bytes.Equal(a, archive) != tc.wantSame {
				t.Errorf("archive bytes same = %v, want %v", bytes.Equal(a, archive), tc.wantSame)
			}
		})
	}
}

// untar extracts an archive written by WriteArchive into a directory.
func untar(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var body []byte
			body, err = io.ReadAll(tr)
			if err == nil {
				err = os.WriteFile(p, body, 0o644)
			}
		default:
			t.Fatalf("unexpected entry %s of type %c in the archive", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestArchiveIsAnOCILayoutOfTheImage(t *testing.T) {
	epoch := time.Unix(1700000000, 0)
	digest, archive := buildArchive(t, baseTree, appTree, epoch)

	index, err := layout.ImageIndexFromPath(untar(t, archive))
	if err != nil {
		t.Fatalf("reading the archive as an OCI layout: %v", err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Digest != digest {
		t.Errorf("index names %s, WriteArchive returned %s", desc.Digest, digest)
	}
	if got := desc.Annotations["io.containerd.image.name"]; got != testRef {
		t.Errorf("containerd image name = %q, want %q", got, testRef)
	}
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != "dev" {
		t.Errorf("OCI ref name = %q, want dev", got)
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != "amd64" {
		t.Errorf("platform = %+v", desc.Platform)
	}

	img, err := index.Image(digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %s", mt)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/dra-kubelet-plugin" || cfg.Config.WorkingDir != "/" ||
		strings.Join(cfg.Config.Env, " ") != "PATH=/usr/bin:/bin:/" || cfg.Config.Labels["org.opencontainers.image.title"] != "dra-kubelet-plugin" {
		t.Errorf("config = %+v", cfg.Config)
	}
	if !cfg.Created.Time.Equal(epoch) {
		t.Errorf("created = %v, want %v", cfg.Created, epoch)
	}
	if len(cfg.History) != 2 || cfg.History[0].CreatedBy != "debian libc6" || cfg.History[1].CreatedBy != "go build" {
		t.Errorf("history = %+v", cfg.History)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2", len(layers))
	}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type = %s, want %s", mt, types.OCILayer)
		}
	}

	// The image's file system is both trees on top of each other.
	files := map[string]string{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		files[h.Name] = string(body)
	}
	for _, f := range append(append([]file(nil), baseTree...), appTree...) {
		if f.dir {
			continue
		}
		if got, ok := files[f.path]; !ok || got != f.content {
			t.Errorf("image file %s = %q (present %v), want %q", f.path, got, ok, f.content)
		}
	}
}

func TestArchiveIsReadByTar(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Fatalf("tar is needed to check the archive with another reader: %v", err)
	}
	_, archive := buildArchive(t, baseTree, appTree, time.Unix(0, 0))
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tar", "-tf", path).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -tf: %v\n%s", err, out)
	}
	for _, want := range []string{"oci-layout", "index.json", "blobs/sha256/"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("archive lacks %s:\n%s", want, out)
		}
	}
}

func TestBuildRefusesIncompleteSpecs(t *testing.T) {
	dir := t.TempDir()
	img, err := Build(Spec{Layers: []Layer{{Dir: dir}}, Entrypoint: []string{"/x"}, OS: "linux", Architecture: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		build   func() error
		wantErr string
	}{
		{name: "no layer", build: func() error { _, err := Build(Spec{Entrypoint: []string{"/x"}}); return err }, wantErr: "at least one layer"},
		{name: "no entrypoint", build: func() error { _, err := Build(Spec{Layers: []Layer{{Dir: dir}}}); return err }, wantErr: "entrypoint"},
		{name: "missing layer directory", build: func() error {
			_, err := Build(Spec{Layers: []Layer{{Dir: filepath.Join(dir, "nope")}}, Entrypoint: []string{"/x"}})
			return err
		}, wantErr: "no such file"},
		{name: "name without tag", build: func() error {
			_, err := WriteArchive(img, "localhost/tangram/gpu-info", filepath.Join(dir, "a.tar"), time.Unix(0, 0))
			return err
		}, wantErr: "registry/repository:tag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.build()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

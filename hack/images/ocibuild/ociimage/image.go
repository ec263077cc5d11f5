// Package ociimage builds container images from directories, reproducibly:
// the same directory trees and settings give the same image digest on any
// machine, whenever they are built. go-containerregistry does the OCI work
// (layers, config, manifest, layout); this package only decides what goes in.
package ociimage

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Layer is one directory that becomes one image layer.
type Layer struct {
	Dir string
	// CreatedBy is the layer's history entry, e.g. which packages it holds.
	CreatedBy string
}

// Spec is everything an image is made of.
type Spec struct {
	// Layers, bottom first.
	Layers     []Layer
	Entrypoint []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
	// Created is the time written into the config, the history and every
	// file of every layer (SOURCE_DATE_EPOCH).
	Created      time.Time
	OS           string
	Architecture string
}

// Build makes the image of spec. Layers are gzip-compressed, as registries
// expect; the gzip stream has no name or time in its header, so compression
// is reproducible with the same Go release.
func Build(spec Spec) (v1.Image, error) {
	if len(spec.Layers) == 0 {
		return nil, fmt.Errorf("an image needs at least one layer directory")
	}
	if len(spec.Entrypoint) == 0 {
		return nil, fmt.Errorf("an image needs an entrypoint")
	}
	created := v1.Time{Time: spec.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range spec.Layers {
		data, err := DirTar(l.Dir, spec.Created)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
			// Keep the gzip stream: the digest and the archive would
			// otherwise each compress the layer again.
		}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("making a layer of %s: %w", l.Dir, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: created, CreatedBy: l.CreatedBy},
		})
		if err != nil {
			return nil, fmt.Errorf("adding the layer of %s: %w", l.Dir, err)
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	cfg.OS, cfg.Architecture = spec.OS, spec.Architecture
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.Env = spec.Env
	cfg.Config.WorkingDir = spec.WorkingDir
	cfg.Config.Labels = maps.Clone(spec.Labels)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the image config: %w", err)
	}
	return img, nil
}

// WriteArchive writes img as a tar of an OCI image layout to path, with ref
// in the index annotations so that `ctr images import` tags it as ref and
// `skopeo copy oci-archive:` finds it. The archive itself is reproducible
// too (sorted, fixed times), so its sha256 is as stable as the image digest.
// It returns the image's manifest digest.
func WriteArchive(img v1.Image, ref, path string, mtime time.Time) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image name %q must be registry/repository:tag: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("computing the digest of %s: %w", ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading the config of %s: %w", ref, err)
	}
	work, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("making a work directory next to %s: %w", path, err)
	}
	defer os.RemoveAll(work)
	lp, err := layout.Write(work, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing an OCI layout: %w", err)
	}
	err = lp.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          tag.Name(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		}),
		layout.WithPlatform(v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture}))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s into an OCI layout: %w", ref, err)
	}
	data, err := DirTar(work, mtime)
	if err != nil {
		return v1.Hash{}, err
	}
	// Write then rename, so an interrupted build never leaves a truncated
	// archive under the final name.
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", path, err)
	}
	return digest, nil
}

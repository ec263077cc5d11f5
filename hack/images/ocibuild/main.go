// Command ocibuild writes a reproducible OCI image archive from directories,
// without Docker or a registry; hack/images/build-images.sh calls it.
//
//	ocibuild --ref localhost/tangram/dra-kubelet-plugin:dev --out plugin.tar \
//	  --layer base/=debian:libc6 --layer app/ --entrypoint /dra-kubelet-plugin
//
// Every time in the image is $SOURCE_DATE_EPOCH (0 when unset). It prints
// the image's manifest digest.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tangram-gpu/tangram/hack/images/ocibuild/ociimage"
)

// listFlag collects a flag given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ocibuild", flag.ContinueOnError)
	var layers, env, labels listFlag
	ref := fs.String("ref", "", "image name with tag, e.g. localhost/tangram/gpu-info:dev")
	out := fs.String("out", "", "OCI archive to write")
	entrypoint := fs.String("entrypoint", "", "absolute path of the program the image runs")
	workdir := fs.String("workdir", "/", "working directory")
	arch := fs.String("arch", "amd64", "image architecture (GOARCH)")
	fs.Var(&layers, "layer", "DIR[=DESCRIPTION]: a directory that becomes a layer, bottom first (repeatable)")
	fs.Var(&env, "env", "KEY=VALUE in the image environment (repeatable)")
	fs.Var(&labels, "label", "KEY=VALUE image label (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" || *out == "" || *entrypoint == "" || len(layers) == 0 {
		return errors.New("--ref, --out, --entrypoint and at least one --layer are required")
	}
	created, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return err
	}
	spec := ociimage.Spec{
		Entrypoint:   []string{*entrypoint},
		Env:          env,
		WorkingDir:   *workdir,
		Created:      created,
		OS:           "linux",
		Architecture: *arch,
		Labels:       map[string]string{},
	}
	for _, l := range layers {
		dir, desc, _ := strings.Cut(l, "=")
		if desc == "" {
			desc = "hack/images/build-images.sh"
		}
		spec.Layers = append(spec.Layers, ociimage.Layer{Dir: dir, CreatedBy: desc})
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		spec.Labels[k] = v
	}
	img, err := ociimage.Build(spec)
	if err != nil {
		return fmt.Errorf("building %s: %w", *ref, err)
	}
	digest, err := ociimage.WriteArchive(img, *ref, *out, created)
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// sourceDateEpoch parses SOURCE_DATE_EPOCH (reproducible-builds.org): whole
// seconds since 1970; empty means 0.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds since 1970 (e.g. $(git log -1 --format=%%ct))", v)
	}
	return time.Unix(s, 0).UTC(), nil
}

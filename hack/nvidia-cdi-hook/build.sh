#!/usr/bin/env bash
# Builds nvidia-cdi-hook, which the CDI specs nvcdi writes call, from the
# NVIDIA container toolkit version in go.mod, into
# ~/.cache/tangram/nvidia-cdi-hook/<version>/ (reused when there), and prints
# its path on the last line. `go install <module>@<version>` builds it with
# the toolkit's own go.mod, so our go.mod and go.sum stay untouched.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
module=github.com/NVIDIA/nvidia-container-toolkit
version="$(go list -m -f '{{.Version}}' "$module")"
dir="${XDG_CACHE_HOME:-$HOME/.cache}/tangram/nvidia-cdi-hook/$version"
if [ ! -x "$dir/nvidia-cdi-hook" ]; then
	mkdir -p "$dir"
	# cgo: the hook links go-nvml; go-nvml's prolog warns about deprecated calls.
	CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" GOBIN="$dir" \
		go install "$module/cmd/nvidia-cdi-hook@$version" >&2
fi
echo "$dir/nvidia-cdi-hook"

#!/usr/bin/env bash
# go vet of every file of this module, each package in a build mode that
# other stages compile anyway, so that vet compiles nothing of its own
# (hack/gomodes.sh):
#
#   hack/vet.sh static   `make verify-static`: every package that builds
#                        without cgo, in the static mode (unit-nocgo, the
#                        images and the e2e tests reuse its compiles), and
#                        the nested hack/bench-placement module
#   hack/vet.sh cgo      `make vet-cgo`: in the race mode (`make unit`
#                        reuses its compiles), the packages the static mode
#                        leaves out: those with files only cgo builds
#                        (go-nvml's users: the cgo twin of a `!cgo` file),
#                        and those that need go-nvml's cgo to build at all
#
# `make test` runs the second beside the cluster stages (hack/test-all.sh).
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=gomodes.sh
source hack/gomodes.sh

mode="${1:-}"
case "$mode" in static | cgo) ;; *) echo "usage: hack/vet.sh static|cgo" >&2; exit 2 ;; esac

nvml=github.com/NVIDIA/go-nvml/pkg/nvml
# Packages (or their tests) that import go-nvml without cgo: go-nvml's
# types live in its cgo files, so they cannot build in the static mode.
need_cgo="$(CGO_ENABLED=0 go list -e -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... |
	awk -v p="$nvml" '{ for (i = 2; i <= NF; i++) if ($i == p) { print $1; break } }' | sed -E 's/\.test$//; s/_test$//' | sort -u)"

if [ "$mode" = static ]; then
	# Every package with Go files when cgo is off (one with files only cgo
	# builds is vet-cgo's).
	all="$(CGO_ENABLED=0 go list -e -f '{{if or .GoFiles .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | grep . | sort)"
	mapfile -t pkgs < <(comm -23 <(echo "$all") <(echo "$need_cgo"))
	echo "==> go vet (static mode): ${#pkgs[@]} packages; without cgo, $(echo "$need_cgo" | grep -c . || true) cannot build and are vet-cgo's"
	CGO_ENABLED=0 go vet "${pkgs[@]}"
	(cd hack/bench-placement && CGO_ENABLED=0 go vet ./...)
	exit 0
fi
# Packages whose files (tests included) differ when cgo is on.
files() { go list -e -f '{{.ImportPath}}|{{.GoFiles}}{{.CgoFiles}}{{.TestGoFiles}}{{.XTestGoFiles}}' ./...; }
differ="$(comm -13 <(CGO_ENABLED=0 files | sort) <(CGO_ENABLED=1 files | sort) | cut -d'|' -f1)"
mapfile -t pkgs < <(printf '%s\n%s\n' "$differ" "$need_cgo" | grep . | sort -u)
if [ "${#pkgs[@]}" -eq 0 ]; then
	# go-nvml's users have cgo twins; none found means the listing broke.
	echo "==> go vet (race mode): found no package with files only cgo builds; go list must have failed" >&2
	exit 1
fi
echo "==> go vet (race mode) of the ${#pkgs[@]} packages with files only cgo builds or that need cgo: ${pkgs[*]#github.com/tangram-gpu/tangram/}"
CGO_ENABLED=1 go vet -race "${pkgs[@]}"

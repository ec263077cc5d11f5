#!/usr/bin/env bash
# `make unit-nocgo`: the unit tests of every package of this module the static
# images link (dra-controller, kubectl-tangram, tangram-scheduler), built
# and run with CGO_ENABLED=0 as the images are. `make unit` runs with cgo
# (the race detector needs it), so a file behind a cgo build tag, or a
# package that only links with cgo, would otherwise go untested in the form
# that ships. The package list comes from `go list -deps`, so it follows the
# code.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO=${GO:-go}
# The static mode of hack/gomodes.sh, in which the static images are built:
# the Kubernetes libraries compiled without cgo are compiled once for both.
# shellcheck source=gomodes.sh
source hack/gomodes.sh
export CGO_ENABLED=0

module=$($GO list -m)
ours() { grep -E "^${module}(/|$)" | grep -v "^${module}/cmd/tangram-scheduler"; }
mapfile -t pkgs < <({
	$GO list -deps ./cmd/dra-controller ./cmd/kubectl-tangram | ours
	(cd cmd/tangram-scheduler && $GO list -deps .) | ours
} | sort -u)
echo "==> CGO_ENABLED=0: vet and test ${#pkgs[@]} packages of this module that dra-controller, kubectl-tangram and tangram-scheduler link"
$GO vet "${pkgs[@]}"
$GO test -count=1 "${pkgs[@]}"

# The tangram-scheduler module itself has no cgo code: make
# test-tangram-scheduler vets and tests it with CGO_ENABLED=0, as its image
# links it (issue 43).

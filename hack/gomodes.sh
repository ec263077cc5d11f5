# The Go build modes of `make test`, for the scripts that run go (sourced).
# A package is compiled once per mode and reused from the build cache by
# every later build in the same mode, so a cold run compiles Kubernetes'
# libraries once per mode; docs/testing.md ("What a cold run compiles")
# says which stage builds in which mode and why there are no more.
#
#   race    go vet and go test of this module (`make verify`, `make unit`)
#   static  CGO_ENABLED=0: the static images, the tests that talk to a
#           cluster or render the chart (e2e, dashboard, chart, GPU check),
#           the tangram-scheduler module, the local cluster's binaries
#   node    CGO_ENABLED=1, tags netgo,osusergo: the kubelet plugin and the
#           CDI hook, in their image and in the GPU check bundle alike
#
# Every mode builds with -trimpath (runtime.Caller then names files by import
# path: code that needs the checkout uses internal/reporoot).

# No DWARF (-gcflags=all=-dwarf=false, -ldflags=-w) in what is compiled and
# linked here (tests, tools; the images strip it anyway): only a debugger
# reads it, and not generating it cuts a cold compile by about a tenth;
# stack traces and race reports keep file:line (the pcln table). A
# command's own -gcflags or -ldflags replaces these.
for flag in -trimpath -gcflags=all=-dwarf=false -ldflags=-w; do
	case " ${GOFLAGS:-} " in
	*" $flag "*) ;;
	*) export GOFLAGS="${GOFLAGS:+$GOFLAGS }$flag" ;;
	esac
done
unset flag

# go ARGS...: the go command with a larger GOGC: the compiler spends much of
# a cold build collecting garbage, and GOGC=400 (a heap up to five times the
# live one, two compiles at a time) cut a cold compile by about a fifth on the
# 2-core VM (docs/testing.md). Only the go commands of the scripts that
# source this file, and what they run (test binaries, go run), get it.
go() { GOGC="${GO_BUILD_GOGC:-400}" command go "$@"; }
# go-nvml's cgo prolog calls functions NVML marks deprecated; the warnings
# are noise. The flags are part of a cgo package's cache key, so every
# script uses the same ones.
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"

# NODE_GO_TAGS are the node binaries' build tags: pure-Go DNS and user
# look-ups (the plugin's image has no NSS modules).
NODE_GO_TAGS=netgo,osusergo

# go_static ARGS...: go in the static mode.
go_static() { CGO_ENABLED=0 go "$@"; }

# go_node build|run ARGS...: go in the node mode.
go_node() {
	local verb="$1"
	shift
	CGO_ENABLED=1 go "$verb" -tags "$NODE_GO_TAGS" "$@"
}

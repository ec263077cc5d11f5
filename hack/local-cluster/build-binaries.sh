#!/usr/bin/env bash
# Builds (or reuses from the cache) every binary the local cluster needs.
#   build-binaries.sh [component...]   components: kube kubeadm etcd containerd runc cni crictl helm
# With no argument it builds all but kubeadm (only the kind node image needs it). Each component lands in
# $CACHE_ROOT/<component>-<version>/bin and is marked complete with a .done file,
# so an interrupted build is redone and a finished one is reused.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Static where possible so the binaries do not care about the host libc.
export CGO_ENABLED="${CGO_ENABLED:-0}"
# The static mode of hack/gomodes.sh (lib.sh adds -trimpath), in which the
# tangram-scheduler module and the static images compile the same packages.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false"

# go_wrapper_build NAME VERSION EST REQUIRE_LINES REPLACE_LINES LDFLAGS PKG...
# Writes a throwaway module in the cache that requires the upstream module and
# builds the given packages from it. Upstream modules with replace directives
# cannot be built with `go install mod@version`, hence the wrapper.
go_wrapper_build() {
	local name="$1" version="$2" est="$3" require="$4" replace="$5" ldflags="$6"
	shift 6
	local dir; dir="$(component_dir "$name" "$version")"
	# .done holds a hash of the wrapper's requirements: a cached build made
	# from other module versions is redone, not reused.
	local key; key="$(printf '%s\n%s\n%s' "$require" "$replace" "$ldflags" | sha256sum | cut -c1-16)"
	if [ -f "$dir/.done" ] && [ "$(cat "$dir/.done")" = "$key" ]; then
		info "reusing cached $name $version ($dir/bin)"
		return 0
	fi
	local start; start="$(now_s)"
	log "building $name $version (cold, $est)…"
	rm -rf "$dir/src" "$dir/bin.tmp" "$dir/.done"
	mkdir -p "$dir/src" "$dir/bin.tmp"
	{
		echo "module tangram.local/build/$name"
		echo
		echo "go 1.26"
		echo
		echo "require ("
		printf '%s\n' "$require"
		echo ")"
		if [ -n "$replace" ]; then
			echo
			echo "replace ("
			printf '%s\n' "$replace"
			echo ")"
		fi
	} >"$dir/src/go.mod"
	{
		echo "//go:build tools"
		echo
		echo "// Package tools pins the commands this wrapper module builds."
		echo "package tools"
		echo
		echo "import ("
		local p
		for p in "$@"; do echo "	_ \"$p\""; done
		echo ")"
	} >"$dir/src/tools.go"
	(
		cd "$dir/src"
		info "resolving modules for $name (go mod tidy in $dir/src)"
		go mod tidy >"$dir/tidy.log" 2>&1 || { tail -n 30 "$dir/tidy.log" >&2; die "resolving modules for $name $version failed (log: $dir/tidy.log)"; }
		[ -z "${WRAPPER_SHARES_WITH:-}" ] || report_shared_versions "$WRAPPER_SHARES_WITH"
		info "compiling $*"
		go build -ldflags "$ldflags" -o "$dir/bin.tmp/" "$@" >"$dir/build.log" 2>&1 \
			|| { tail -n 30 "$dir/build.log" >&2; die "building $name $version failed (log: $dir/build.log)"; }
	)
	rm -rf "$dir/bin"
	mv "$dir/bin.tmp" "$dir/bin"
	echo "$key" >"$dir/.done"
	log "built $name $version in $(elapsed "$start") → $dir/bin"
}

# kube_wrapper_build NAME EST CMD...: builds commands of k8s.io/kubernetes at
# $KUBE_VERSION through a wrapper module (see go_wrapper_build).
kube_wrapper_build() {
	local name="$1" est="$2"
	shift 2
	local v="$KUBE_VERSION" staging="${KUBE_VERSION/#v1./v0.}" m
	local staging_modules="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
		cloud-provider cluster-bootstrap code-generator component-base component-helpers
		controller-manager cri-api cri-client cri-streaming csi-translation-lib
		dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
		kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils
		pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming"
	# The kubernetes module replaces its staging modules with ./staging paths;
	# a consumer must point them at the published versions instead.
	local replace=""
	for m in $staging_modules; do replace+="	k8s.io/$m => k8s.io/$m $staging"$'\n'; done
	local major="${v#v}"; major="${major%%.*}"
	local minor="${v#v*.}"; minor="${minor%%.*}"
	local ld="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	WRAPPER_SHARES_WITH="$REPO_ROOT/cmd/tangram-scheduler" \
		go_wrapper_build "$name" "$v" "$est" "$(kube_requirements "$v")" "$replace" "$ld" "$@"
}

# report_shared_versions DIR: in a wrapper module, how many of the modules
# it shares with the module in DIR it requires at the same version (only
# those packages can come from the build cache).
report_shared_versions() {
	local mine theirs
	mine="$(go list -m -f '{{.Path}} {{.Version}}' all | sort)"
	theirs="$(cd "$1" && go list -m -f '{{.Path}} {{.Version}}' all | sort)"
	local both same differ
	both="$(join <(echo "$mine") <(echo "$theirs"))"
	same="$(awk '$2 == $3' <<<"$both" | wc -l)"
	differ="$(awk '$2 != $3 { printf " %s %s (%s)", $1, $2, $3 }' <<<"$both")"
	info "$same of the $(wc -l <<<"$both") modules shared with ${1#"$REPO_ROOT"/} at its versions${differ:+; differing:$differ}"
}

# kube_requirements VERSION: the wrapper's require lines. When the
# tangram-scheduler module builds the same Kubernetes release (its staging
# modules pinned to the same versions), every module of its graph is required
# at the version it selects there, so the wrapper resolves exactly the same
# versions for the modules both share. With the same flags as the static
# images and the scheduler_perf glue (CGO_ENABLED=0, -trimpath), the Go build
# cache then compiles client-go, the scheduler and the API server once for the
# tangram-scheduler image, its tests and this build, not once each (issue 43:
# about a third of a cold Kubernetes build). Kubernetes is then built with the
# newer versions of a few libraries (golang.org/x/*, prometheus) that
# tangram-scheduler itself ships with. Any other KUBE_VERSION: Kubernetes'
# own requirements.
kube_requirements() {
	local v="$1" sched="$REPO_ROOT/cmd/tangram-scheduler"
	local sched_kube; sched_kube="$(cd "$sched" && go list -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null)"
	if [ "$sched_kube" != "$v" ]; then
		printf '\tk8s.io/kubernetes %s\n' "$v"
		return
	fi
	# Each module at the version the module requires, our own left out. A
	# replaced staging module keeps its required version too (v0.37.2 =>
	# v0.37.0 there): -trimpath names a replaced module's files after the
	# requirement, so requiring the target instead would compile different
	# packages from the same source.
	(cd "$sched" && go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all) |
		awk 'NF == 2 && $1 != "github.com/tangram-gpu/tangram" && $2 != "" { printf "\t%s %s\n", $1, $2 }'
}

build_kube() {
	kube_wrapper_build kubernetes "~2-3 min on 2 cores after the tangram-scheduler stage compiled its packages, ~14 min from an empty Go build cache" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kubectl
}

# kubeadm is only needed inside the kind node image (hack/kind); the local
# cluster runs without it. A separate cache entry so the local cluster's
# cached build stays valid.
build_kubeadm() {
	kube_wrapper_build kubeadm "~3 min on 2 cores after kube" k8s.io/kubernetes/cmd/kubeadm
}

# go_install_build NAME VERSION EST PKG@VERSION...: for upstream modules that
# `go install` accepts directly (no replace directives in their go.mod).
go_install_build() {
	local name="$1" version="$2" est="$3"
	shift 3
	local dir; dir="$(component_dir "$name" "$version")"
	if [ -f "$dir/.done" ]; then
		info "reusing cached $name $version ($dir/bin)"
		return 0
	fi
	local start; start="$(now_s)"
	log "building $name $version (cold, $est)…"
	rm -rf "$dir/bin.tmp"
	mkdir -p "$dir/bin.tmp"
	info "go install $*"
	GOBIN="$dir/bin.tmp" go install -ldflags "-s -w" "$@" >"$dir/build.log" 2>&1 \
		|| { tail -n 30 "$dir/build.log" >&2; die "building $name $version failed (log: $dir/build.log)"; }
	rm -rf "$dir/bin"
	mv "$dir/bin.tmp" "$dir/bin"
	touch "$dir/.done"
	log "built $name $version in $(elapsed "$start") → $dir/bin"
}

build_etcd() {
	# etcd's server module has replace directives, so it needs a wrapper too.
	go_wrapper_build etcd "$ETCD_VERSION" "~1 min" \
		"	go.etcd.io/etcd/server/v3 $ETCD_VERSION" "" "-s -w" \
		go.etcd.io/etcd/server/v3
	# Go names the binary after the last non-version path element: "server".
	local bin; bin="$(component_dir etcd "$ETCD_VERSION")/bin"
	[ -x "$bin/etcd" ] || mv "$bin/server" "$bin/etcd" || die "etcd binary missing in $bin"
}

build_containerd() {
	# containerd v2 always enables CDI, which is what the kubelet plugin needs;
	# Debian's containerd 1.6 has no CDI support.
	local m="github.com/containerd/containerd/v2/cmd"
	go_install_build containerd "$CONTAINERD_VERSION" "~4 min" \
		"$m/containerd@$CONTAINERD_VERSION" \
		"$m/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"$m/ctr@$CONTAINERD_VERSION"
}

build_crictl() {
	go_wrapper_build crictl "$CRICTL_VERSION" "~1 min" \
		"	sigs.k8s.io/cri-tools $CRICTL_VERSION" "" "-s -w" \
		sigs.k8s.io/cri-tools/cmd/crictl
}

build_helm() {
	local major="${HELM_VERSION%%.*}"
	go_install_build helm "$HELM_VERSION" "~3 min" "helm.sh/helm/$major/cmd/helm@$HELM_VERSION"
}

# runc and the CNI plugins come from Debian: they are plain host tools, and
# building runc with seccomp needs cgo and libseccomp-dev anyway.
build_runc() {
	apt_install runc
	command -v runc >/dev/null || die "runc is not on PATH after installing the Debian package"
	info "using $(runc --version | head -n1) from Debian ($(command -v runc))"
}

build_cni() {
	apt_install containernetworking-plugins
	[ -x /usr/lib/cni/bridge ] || die "/usr/lib/cni/bridge missing after installing containernetworking-plugins"
	info "using CNI plugins from Debian (/usr/lib/cni)"
}

main() {
	local components=("$@")
	[ "${#components[@]}" -gt 0 ] || components=(kube etcd containerd runc cni crictl helm)
	local c
	for c in "${components[@]}"; do
		case "$c" in
		kube) build_kube ;;
		kubeadm) build_kubeadm ;;
		etcd) build_etcd ;;
		containerd) build_containerd ;;
		runc) build_runc ;;
		cni) build_cni ;;
		crictl) build_crictl ;;
		helm) build_helm ;;
		*) die "unknown component '$c' (known: kube kubeadm etcd containerd runc cni crictl helm)" ;;
		esac
	done
}

main "$@"

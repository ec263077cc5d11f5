#!/usr/bin/env bash
# `make test-e2e-realpath`: the code path of a real GPU node, end to end,
# without a GPU. Cluster up with the mock NVIDIA driver root
# (hack/mock-driver-root), the Helm chart installed with the cgo kubelet
# plugin image, driverRoot = the mock root and no fake profile, then the e2e
# specs labelled `realpath` (test/e2e/realpath_test.go), then cluster down
# (always, also after a failure), printing how long each stage took.
# Set KEEP_CLUSTER=1 to leave the cluster running for inspection.
# MPS runs in v3 mode (namespaces per claim on the stand-in); the chart's
# values: deployments/helm/values/mock-driver-root.yaml and realpath.yaml.
# Then, on the same cluster, driver r580 with the chart's defaults (stage
# e2e-realpath-r580): a second mock root as NVIDIA driver 580 (what most
# clusters run: no MPS v3, no per-cgroup memory limits), the release
# reinstalled on it with default sharing values, and the specs labelled
# `realpath && r580` (test/e2e/advisory_test.go). SKIP_R580=1 leaves it out;
# ONLY_R580=1 runs only it (after cluster-up).
# Before it, MIG (stage e2e-realpath-mig): a third mock root on the built-in
# profile mig-h100 (cards 0 and 1 in MIG mode; mig-minors, /proc/devices and
# /dev/nvidia-caps as the real driver has them), the release reinstalled on
# it, and the specs labelled `realpath && mig-realpath`
# (test/e2e/realpath_mig_test.go: the demo's MIG scenario with each
# container's device nodes checked). SKIP_MIG=1 leaves it out; ONLY_MIG=1
# runs only it (after cluster-up).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$(dirname "${BASH_SOURCE[0]}")"
need_root
cluster_lock
# The mock driver root, not a fake profile (chart.sh would --set this one).
unset TANGRAM_FAKE_PROFILE

# The chart's default image (values.yaml), which cluster-up built and imported.
PLUGIN_IMAGE=localhost/tangram/dra-kubelet-plugin:dev
# The plugin's checkpoints and the mock library's state (calls.log) live
# under the cluster directory, the MPS directories under MPS_RUN_ROOT
# (lib.sh), so down.sh removes them and the next run starts as after a
# reboot.
STATE_DIR="$CLUSTER_DIR/realpath/state"
MPS_ROOT="$MPS_RUN_ROOT/realpath/mps"
MOCK_NVML_STATE_DIR="$STATE_DIR/mock-nvml"
# The r580 stage: its own mock root, plugin state and MPS root.
R580_DRIVER_ROOT="$MOCK_DRIVER_ROOT-r580"
R580_STATE_DIR="$CLUSTER_DIR/realpath-r580/state"
R580_MPS_ROOT="$MPS_RUN_ROOT/realpath-r580/mps"
R580_NVML_STATE_DIR="$R580_STATE_DIR/mock-nvml"
# The MIG stage: its own mock root (profile mig-h100), plugin state and MPS root.
MIG_DRIVER_ROOT="$MOCK_DRIVER_ROOT-mig"
MIG_STATE_DIR="$CLUSTER_DIR/realpath-mig/state"
MIG_MPS_ROOT="$MPS_RUN_ROOT/realpath-mig/mps"
MIG_NVML_STATE_DIR="$MIG_STATE_DIR/mock-nvml"

finish() {
	local rc=$?
	set +o errexit
	if [ $rc -ne 0 ] && [ -f "$KUBECONFIG_FILE" ]; then
		"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" get pods -o wide >&2
		"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" logs -l app.kubernetes.io/component=kubelet-plugin --tail=60 >&2
	fi
	down_unless_kept stage cluster-down "$HERE/down.sh"
	if [ -z "${KEEP_CLUSTER:-}" ] && [ -f "$R580_DRIVER_ROOT/TANGRAM-MOCK-DRIVER-ROOT" ]; then
		rm -rf --one-file-system "$R580_DRIVER_ROOT" "$CLUSTER_DIR/realpath-r580"
	fi
	if [ -z "${KEEP_CLUSTER:-}" ] && [ -f "$MIG_DRIVER_ROOT/TANGRAM-MOCK-DRIVER-ROOT" ]; then
		rm -rf --one-file-system "$MIG_DRIVER_ROOT" "$CLUSTER_DIR/realpath-mig"
	fi
	stage_summary
	[ $rc -eq 0 ] && log "test-e2e-realpath passed" || log "test-e2e-realpath FAILED (exit $rc); component logs in $LOG_DIR"
	exit $rc
}
trap finish EXIT

# shared_mount DIR: DIR as a shared mount point on the host (a bind mount
# of itself), which the plugin's Bidirectional mount of its MPS root needs
# (containerd refuses one whose source is not on a shared mount): the
# plugin mounts each claim's /dev/shm tmpfs under it, and the host and
# containerd must see it. down.sh unmounts everything under MPS_RUN_ROOT.
shared_mount() {
	mountpoint -q "$1" || mount --bind "$1" "$1"
	mount --make-rshared "$1"
}

# install_mock_chart DRIVER_ROOT STATE_DIR MPS_ROOT NVML_STATE_DIR [HELM_ARGS...]:
# the local cluster's chart install (chart.sh) with the plugin on a mock
# driver root instead of a fake profile, plugin only
# (deployments/helm/values/mock-driver-root.yaml and realpath.yaml).
install_mock_chart() {
	local root="$1" state="$2" mps="$3" nvml_state="$4"
	shift 4
	mkdir -p "$state" "$mps"
	shared_mount "$mps"
	"$HERE/chart.sh" install \
		-f "$CHART_VALUES_DIR/mock-driver-root.yaml" -f "$CHART_VALUES_DIR/realpath.yaml" \
		--set "driverRoot=$root" \
		--set-json "kubeletPlugin.extraEnv=${LOOPBACK_API_ENV%]},{\"name\":\"TANGRAM_MOCK_NVML_STATE_DIR\",\"value\":\"$nvml_state\"}]" \
		--set "kubeletPlugin.hostPaths.stateDir=$state" \
		--set "kubeletPlugin.hostPaths.mpsRoot=$mps" \
		"$@"
}

# install_chart: MPS v3 (namespaces per claim on the stand-in), the mock
# root's cgroup fixture, and the usage watcher evicting shares over their
# memory and pods running a process no claim accounts for, every 2s
# (test/e2e/realpath_usage_test.go).
install_chart() {
	install_mock_chart "$MOCK_DRIVER_ROOT" "$STATE_DIR" "$MPS_ROOT" "$MOCK_NVML_STATE_DIR" \
		--set "kubeletPlugin.cgroupRoot=$MOCK_DRIVER_ROOT/sys/fs/cgroup" \
		--set kubeletPlugin.mps.mode=v3 \
		--set kubeletPlugin.usage.overShare=evict --set kubeletPlugin.usage.unaccounted=evict \
		--set kubeletPlugin.usage.interval=2s
}

# install_chart_r580: the release again, on the r580 mock root, with the
# chart's default sharing values (no mps.mode, no requireHardEnforcement, no
# backend; the host's cgroup root): what an admin of an r580 cluster gets
# out of the box.
install_chart_r580() {
	# The first stage's release, if any: its MPS daemon pod (v3) goes with it.
	"$HERE/chart.sh" uninstall || true
	TANGRAM_MOCK_NVML_NODE_NAME="$NODE_NAME" TANGRAM_MOCK_NVML_DRIVER_VERSION=580.105.08 TANGRAM_MOCK_NVML_STATE_DIR="$R580_NVML_STATE_DIR" \
		"$REPO_ROOT/hack/mock-driver-root/create.sh" "$R580_DRIVER_ROOT" >/dev/null
	install_mock_chart "$R580_DRIVER_ROOT" "$R580_STATE_DIR" "$R580_MPS_ROOT" "$R580_NVML_STATE_DIR"
}

# install_chart_mig: the release again, on a mock root serving the built-in
# profile mig-h100 (the MIG scenario of test/e2e/realpath_mig_test.go), with
# the chart's default sharing values.
install_chart_mig() {
	"$HERE/chart.sh" uninstall || true
	TANGRAM_MOCK_NVML_PROFILE=mig-h100 TANGRAM_MOCK_NVML_NODE_NAME="$NODE_NAME" TANGRAM_MOCK_NVML_STATE_DIR="$MIG_NVML_STATE_DIR" \
		"$REPO_ROOT/hack/mock-driver-root/create.sh" "$MIG_DRIVER_ROOT" >/dev/null
	install_mock_chart "$MIG_DRIVER_ROOT" "$MIG_STATE_DIR" "$MIG_MPS_ROOT" "$MIG_NVML_STATE_DIR"
}

# run_specs LABEL_FILTER DRIVER_ROOT NVML_STATE_DIR MPS_ROOT [go test -args...]
run_specs() {
	local filter="$1" root="$2" nvml_state="$3" mps_root="$4"
	shift 4
	cd "$REPO_ROOT"
	go_static test -v -tags e2e -count=1 -timeout "${E2E_TIMEOUT:-20m}" ./test/e2e -args \
		--kubeconfig "$KUBECONFIG_FILE" -ginkgo.v -ginkgo.no-color -ginkgo.label-filter="$filter" \
		--gpu-node "$NODE_NAME" --cdi-dir "$CDI_DIR" \
		--mock-driver-root "$root" --mock-nvml-state-dir "$nvml_state" \
		--mps-root "$mps_root" --release-namespace "$RELEASE_NAMESPACE" --plugin-image "$PLUGIN_IMAGE" \
		--helm "$HELM_BIN/helm" --helm-release "$RELEASE" \
		--crictl "$CRICTL_BIN/crictl" --cri-endpoint "unix://$CONTAINERD_SOCK" "$@"
}

# Compiling the suite first fails fast on a broken test before any cluster work.
stage e2e-vet go_static vet -tags e2e "$REPO_ROOT/test/e2e/"
# Driver 615 and a cgroup v2 + dmem fixture make the node "hard": shares
# get tangram-cdi-hook (the kernel's enforcement itself is not exercised).
# The library's built-in state directory is the plugin's, so tangram-cdi-hook
# (run by containerd, without the plugin's environment) logs to the same
# calls.log.
stage cluster-up env TANGRAM_MOCK_DRIVER_ROOT=1 TANGRAM_MOCK_NVML_DRIVER_VERSION=615.23.01 TANGRAM_MOCK_CGROUP_DMEM=1 \
	TANGRAM_MOCK_NVML_STATE_DIR="$MOCK_NVML_STATE_DIR" "$HERE/up.sh"
if [ -z "${ONLY_R580:-}" ] && [ -z "${ONLY_MIG:-}" ]; then
	stage chart-install install_chart
	stage e2e-realpath run_specs "realpath && !r580 && !mig-realpath" "$MOCK_DRIVER_ROOT" "$MOCK_NVML_STATE_DIR" "$MPS_ROOT" "$@"
fi
if [ -z "${SKIP_MIG:-}" ] && [ -z "${ONLY_R580:-}" ]; then
	stage chart-install-mig install_chart_mig
	stage e2e-realpath-mig run_specs "realpath && mig-realpath" "$MIG_DRIVER_ROOT" "$MIG_NVML_STATE_DIR" "$MIG_MPS_ROOT" "$@"
fi
if [ -z "${SKIP_R580:-}" ] && [ -z "${ONLY_MIG:-}" ]; then
	stage chart-install-r580 install_chart_r580
	stage e2e-realpath-r580 run_specs "realpath && r580" "$R580_DRIVER_ROOT" "$R580_NVML_STATE_DIR" "$R580_MPS_ROOT" "$@"
fi

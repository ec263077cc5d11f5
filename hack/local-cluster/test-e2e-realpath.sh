#!/usr/bin/env bash
# `make test-e2e-realpath`: the code path of a real GPU node, end to end,
# without a GPU. Cluster up with the mock NVIDIA driver root
# (hack/mock-driver-root), the Helm chart installed with the cgo kubelet
# plugin image, driverRoot = the mock root and no fake profile, then the e2e
# specs labelled `realpath` (test/e2e/realpath_test.go), then cluster down
# (always, also after a failure), printing how long each stage took.
# Set KEEP_CLUSTER=1 to leave the cluster running for inspection.
# MPS runs in v3 mode (namespaces per claim on the stand-in); shmSize=0:
# per-claim /dev/shm directories without a tmpfs of their own (the plugin
# pod would need Bidirectional propagation on a shared host mount).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$(dirname "${BASH_SOURCE[0]}")"
need_root
cluster_lock

PLUGIN_IMAGE=localhost/tangram/dra-kubelet-plugin:dev
# The plugin's checkpoints, the MPS directories and the mock library's state
# (calls.log) live under the cluster directory, so down.sh removes them and
# the next run starts as after a reboot.
STATE_DIR="$CLUSTER_DIR/realpath/state"
MPS_ROOT="$CLUSTER_DIR/realpath/mps"
MOCK_NVML_STATE_DIR="$STATE_DIR/mock-nvml"

finish() {
	local rc=$?
	set +o errexit
	if [ $rc -ne 0 ] && [ -f "$KUBECONFIG_FILE" ]; then
		"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" get pods -o wide >&2
		"$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" -n "$RELEASE_NAMESPACE" logs -l app.kubernetes.io/component=kubelet-plugin --tail=60 >&2
	fi
	down_unless_kept stage cluster-down "$HERE/down.sh"
	stage_summary
	[ $rc -eq 0 ] && log "test-e2e-realpath passed" || log "test-e2e-realpath FAILED (exit $rc); component logs in $LOG_DIR"
	exit $rc
}
trap finish EXIT

# install_chart: the local cluster's chart install (chart.sh), with the
# plugin on the mock driver root instead of a fake profile, hard enforcement
# required, and no controller or scheduler (no realpath spec needs them).
install_chart() {
	mkdir -p "$STATE_DIR" "$MPS_ROOT"
	"$HERE/chart.sh" install \
		--set fakeGPU.profile= \
		--set controller.enabled=false \
		--set scheduler.enabled=false \
		--set "driverRoot=$MOCK_DRIVER_ROOT" \
		--set "kubeletPlugin.cgroupRoot=$MOCK_DRIVER_ROOT/sys/fs/cgroup" \
		--set sharing.requireHardEnforcement=true \
		--set kubeletPlugin.sysfsRoot=/driver-root/sys \
		--set "kubeletPlugin.image.repository=${PLUGIN_IMAGE%:*}" \
		--set "image.tag=${PLUGIN_IMAGE##*:}" \
		--set-json "kubeletPlugin.extraEnv=[{\"name\":\"KUBERNETES_SERVICE_HOST\",\"value\":\"127.0.0.1\"},{\"name\":\"KUBERNETES_SERVICE_PORT\",\"value\":\"$APISERVER_PORT\"},{\"name\":\"TANGRAM_MOCK_NVML_STATE_DIR\",\"value\":\"$MOCK_NVML_STATE_DIR\"}]" \
		--set "kubeletPlugin.hostPaths.stateDir=$STATE_DIR" \
		--set "kubeletPlugin.hostPaths.mpsRoot=$MPS_ROOT" \
		--set kubeletPlugin.mps.mode=v3 \
		--set kubeletPlugin.mps.shmSize=0
}

run_specs() {
	cd "$REPO_ROOT"
	go test -v -tags e2e -count=1 -timeout "${E2E_TIMEOUT:-20m}" ./test/e2e -args \
		--kubeconfig "$KUBECONFIG_FILE" -ginkgo.v -ginkgo.no-color -ginkgo.label-filter=realpath \
		--gpu-node "$NODE_NAME" --cdi-dir "$CDI_DIR" \
		--mock-driver-root "$MOCK_DRIVER_ROOT" --mock-nvml-state-dir "$MOCK_NVML_STATE_DIR" \
		--mps-root "$MPS_ROOT" --release-namespace "$RELEASE_NAMESPACE" --plugin-image "$PLUGIN_IMAGE" \
		--helm "$HELM_BIN/helm" --helm-release "$RELEASE" \
		--crictl "$CRICTL_BIN/crictl" --cri-endpoint "unix://$CONTAINERD_SOCK" "$@"
}

# Compiling the suite first fails fast on a broken test before any cluster work.
stage e2e-vet go vet -tags e2e "$REPO_ROOT/test/e2e/"
# Driver 615 and a cgroup v2 + dmem fixture make the node "hard": shares
# get tangram-cdi-hook (the kernel's enforcement itself is not exercised).
# The library's built-in state directory is the plugin's, so tangram-cdi-hook
# (run by containerd, without the plugin's environment) logs to the same
# calls.log.
stage cluster-up env TANGRAM_MOCK_DRIVER_ROOT=1 TANGRAM_MOCK_NVML_DRIVER_VERSION=615.23.01 TANGRAM_MOCK_CGROUP_DMEM=1 \
	TANGRAM_MOCK_NVML_STATE_DIR="$MOCK_NVML_STATE_DIR" "$HERE/up.sh"
stage chart-install install_chart
stage e2e-realpath run_specs "$@"

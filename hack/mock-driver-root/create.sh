#!/usr/bin/env bash
# Creates a mock NVIDIA driver root: the tree a GPU node's driver installs,
# with the mock libnvidia-ml.so.1 serving a fake profile, so that the kubelet
# plugin's real-GPU path (NVML, nvcdi, compute modes, MPS) runs on a machine
# without GPUs. See docs/nvml.md ("The mock driver root").
#
#   create.sh ROOT     (as root: device nodes need mknod)
#
#   TANGRAM_MOCK_NVML_PROFILE    built-in profile or profile YAML (default dgx-h100)
#   TANGRAM_MOCK_NVML_NODE_NAME  node the cards' UUIDs are derived from, as
#                                --fake-profile on that node (default: hostname)
#   TANGRAM_MOCK_NVML_STATE_DIR  the library's calls.log/events/compute modes
#                                (default /var/lib/tangram/mock-nvml)
#   TANGRAM_MOCK_NVML_DRIVER_VERSION  driver version the library reports instead
#                                of the profile's (615.23.01 and later: per-cgroup
#                                memory limits and MPS v3)
#   TANGRAM_MOCK_CGROUP_DMEM     1: lay out ROOT/sys/fs/cgroup as a cgroup v2 host
#                                configured for hard enforcement: the dmem
#                                controller in cgroup.controllers and +dmem in
#                                cgroup.subtree_control of the root, kubepods and
#                                its QoS cgroups (the kubelet's cgroupfs layout),
#                                for the plugin's --cgroup-root (chart:
#                                kubeletPlugin.cgroupRoot); nothing is enforced
#
# An existing ROOT is replaced only if an earlier run made it. Prints ROOT on
# the last line.
set -euo pipefail

root="${1:?usage: create.sh ROOT}"
case "$root" in /*) ;; *) root="$(pwd)/$root" ;; esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
# shellcheck source=../gomodes.sh
source hack/gomodes.sh
marker="TANGRAM-MOCK-DRIVER-ROOT"
export TANGRAM_MOCK_NVML_PROFILE="${TANGRAM_MOCK_NVML_PROFILE:-dgx-h100}"
export TANGRAM_MOCK_NVML_NODE_NAME="${TANGRAM_MOCK_NVML_NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}"
export TANGRAM_MOCK_NVML_STATE_DIR="${TANGRAM_MOCK_NVML_STATE_DIR:-/var/lib/tangram/mock-nvml}"

[ "$(id -u)" = 0 ] || { echo "mock driver root: run as root (device nodes are made with mknod)" >&2; exit 1; }
if [ -e "$root" ]; then
	[ -f "$root/$marker" ] || { echo "mock driver root: $root exists and was not made by this script; remove it or pick another path" >&2; exit 1; }
	rm -rf "$root"
fi

# A new root is a freshly booted driver: no compute modes set, no calls, no
# events (only the library's own files are removed from the state directory).
state="$TANGRAM_MOCK_NVML_STATE_DIR"
rm -rf "$state/calls.log" "$state/events" "$state/compute-mode" "$state/mig-mode" "$state/mig" "$state/mig-busy" "$state/memory-limits" "$state/fail-memory-limits" "$state/processes" "$state/utilization"

lib="$(hack/mock-nvml/build.sh | tail -n1)"
hook="$(hack/nvidia-cdi-hook/build.sh | tail -n1)"

mkdir -p "$root/usr/lib64" "$root/usr/bin" "$root/dev" "$root/proc/driver/nvidia" "$root/usr/share/tangram-mock-nvml"
devices="$root/usr/share/tangram-mock-nvml/devices"
go_static run ./hack/mock-nvml/cmd/mock-nvml-profile -profile "$TANGRAM_MOCK_NVML_PROFILE" \
	-node-name "$TANGRAM_MOCK_NVML_NODE_NAME" -driver-version "${TANGRAM_MOCK_NVML_DRIVER_VERSION:-}" -sysfs "$root/sys" \
	-mig-minors "$root/proc/driver/nvidia-caps/mig-minors" -o "$devices"
version="$(awk '$1 == "driver" {print $2}' "$devices")"
[ -n "$version" ] && [ "$version" != "-" ] || { echo "mock driver root: the profile names no driverVersion" >&2; exit 1; }

# NVML: the mock, with the driver's link chain.
lib64="$root/usr/lib64"
install -m 0755 "$lib" "$lib64/libnvidia-ml.so.$version"
ln -s "libnvidia-ml.so.$version" "$lib64/libnvidia-ml.so.1"
ln -s libnvidia-ml.so.1 "$lib64/libnvidia-ml.so"

# The other driver libraries nvcdi mounts (it finds them by the driver
# version suffix; libcuda's directory is the driver's library directory):
# empty shared objects with the real sonames.
stub="$(mktemp -d)"
trap 'rm -rf "$stub"' EXIT
echo 'int tangram_mock_driver_stub;' >"$stub/stub.c"
for name in libcuda libnvidia-ptxjitcompiler libnvidia-nvvm libnvidia-cfg libnvidia-opencl libcudadebugger libnvidia-gpucomp libnvidia-allocator; do
	"${CC:-gcc}" -shared -fPIC -Wl,-soname,"$name.so.1" -o "$lib64/$name.so.$version" "$stub/stub.c"
	ln -s "$name.so.$version" "$lib64/$name.so.1"
done
ln -s libcuda.so.1 "$lib64/libcuda.so"

# Programs: the toolkit's nvidia-cdi-hook, the stand-in MPS control (static,
# so the daemon pod runs it too) and a nvidia-smi that says what it is.
install -m 0755 "$hook" "$root/usr/bin/nvidia-cdi-hook"
go_static build -ldflags "-X main.driverVersion=$version" -o "$root/usr/bin/nvidia-cuda-mps-control" ./hack/mock-driver-root/cmd/nvidia-cuda-mps-control
printf '#!/bin/sh\necho "mock NVIDIA driver %s (Tangram mock driver root): no GPU here" >&2\nexit 9\n' "$version" >"$root/usr/bin/nvidia-smi"
chmod 0755 "$root/usr/bin/nvidia-smi"
mkdir -p "$root/lib/firmware/nvidia/$version"
: >"$root/lib/firmware/nvidia/$version/gsp_ga10x.bin"

cat >"$root/proc/driver/nvidia/version" <<VERSION
NVRM version: NVIDIA UNIX x86_64 Kernel Module  $version  (Tangram mock driver root)
GCC version:  $("${CC:-gcc}" --version | head -n1)
VERSION

# Device nodes: one per card (its minor), the control devices, UVM. UVM's
# major is dynamic on a real node; 511 is unused on ordinary machines.
awk '$1 == "gpu" {print $3}' "$devices" | while read -r minor; do
	mknod -m 0666 "$root/dev/nvidia$minor" c 195 "$minor"
done
mknod -m 0666 "$root/dev/nvidiactl" c 195 255
mknod -m 0666 "$root/dev/nvidia-modeset" c 195 254
mknod -m 0666 "$root/dev/nvidia-uvm" c 511 0
mknod -m 0666 "$root/dev/nvidia-uvm-tools" c 511 1

# MIG capabilities, as driver 580.159.04 publishes them with MIG mode off
# (docs/gpu-reports/h200-580.159.04-mig-caps.txt): mig-minors (written
# above by mock-nvml-profile, byte for byte the real file), the majors in
# /proc/devices, the config and monitor capability files, and only the
# config and monitor nodes in /dev/nvidia-caps (cr-------- and cr--r--r--):
# a GPU or compute instance's node exists on a real host only once
# something creates it, so the plugin's CDI spec carries its major and
# minor. nvidia-caps' major is dynamic (241 on the H200); 510 is unused on
# ordinary machines.
caps_major=510
cat >"$root/proc/devices" <<DEVICES
Character devices:
195 nvidia
195 nvidiactl
511 nvidia-uvm
$caps_major nvidia-caps

Block devices:
DEVICES
mkdir -p "$root/proc/driver/nvidia/capabilities/mig" "$root/dev/nvidia-caps"
printf 'DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n' >"$root/proc/driver/nvidia/capabilities/mig/config"
printf 'DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n' >"$root/proc/driver/nvidia/capabilities/mig/monitor"
mknod -m 0400 "$root/dev/nvidia-caps/nvidia-cap1" c "$caps_major" 1
mknod -m 0444 "$root/dev/nvidia-caps/nvidia-cap2" c "$caps_major" 2

# What the plugin will detect (pkg/plugin/enforcement) and publish as
# shareEnforcement: hard needs driver 615+ (whose library has the memory
# limit calls) and cgroup v2 with dmem enabled from the root down to the
# kubelet's pod cgroups, which this host only has as the fixture below, as
# a good node is configured (the kernel's own enforcement is never
# exercised; the mock library answers as the running kernel allows).
enforcement=advisory
if [ "${version%%.*}" -ge 615 ]; then
	enforcement=compute-only
	if [ "${TANGRAM_MOCK_CGROUP_DMEM:-}" = 1 ]; then
		cg="$root/sys/fs/cgroup"
		mkdir -p "$cg/kubepods/burstable" "$cg/kubepods/besteffort"
		echo "cpuset cpu io memory hugetlb pids rdma misc dmem" >"$cg/cgroup.controllers"
		for level in "" kubepods kubepods/burstable kubepods/besteffort; do
			echo "cpuset cpu io memory hugetlb pids rdma misc dmem" >"$cg/$level/cgroup.subtree_control"
		done
		enforcement=hard
	fi
fi

cat >"$root/$marker" <<INFO
Made by hack/mock-driver-root/create.sh; see docs/nvml.md.
profile=$TANGRAM_MOCK_NVML_PROFILE
node=$TANGRAM_MOCK_NVML_NODE_NAME
state_dir=$TANGRAM_MOCK_NVML_STATE_DIR
driver_version=$version
share_enforcement=$enforcement
INFO
echo "$root"

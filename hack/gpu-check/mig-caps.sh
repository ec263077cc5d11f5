#!/usr/bin/env bash
# Read-only: what the NVIDIA kernel module publishes for MIG capabilities on
# this node (docs/nvml.md, "MIG device nodes"). Changes nothing on the GPU.
# Writes everything to ${OUT:-.}/mig-caps.txt and prints a summary.
set -u
out="${OUT:-.}/mig-caps.txt"
{
	echo "## date"; date -u
	echo "## nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,mig.mode.current,mig.mode.pending --format=csv 2>&1
	echo "## /proc/devices (nvidia)"; grep -i nvidia /proc/devices
	echo "## ls -la /proc/driver/nvidia-caps"; ls -la /proc/driver/nvidia-caps 2>&1
	echo "## wc -l mig-minors"; wc -l /proc/driver/nvidia-caps/mig-minors 2>&1
	echo "## sha256sum mig-minors"; sha256sum /proc/driver/nvidia-caps/mig-minors 2>&1
	for f in /proc/driver/nvidia-caps/*; do echo "## head -5 $f"; head -5 "$f" 2>&1; done
	echo "## /dev/nvidia*"; ls -la /dev/nvidia* 2>&1
	echo "## /dev/nvidia-caps"; ls -la /dev/nvidia-caps 2>&1
	echo "## find /proc/driver/nvidia/capabilities (first 40)"; find /proc/driver/nvidia/capabilities 2>&1 | head -40
	for f in /proc/driver/nvidia/capabilities/mig/config /proc/driver/nvidia/capabilities/mig/monitor \
		/proc/driver/nvidia/capabilities/gpu0/mig/gi0/access /proc/driver/nvidia/capabilities/gpu0/mig/gi1/access \
		/proc/driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access; do
		echo "## cat $f"; cat "$f" 2>&1
	done
	echo "## /proc/driver/nvidia/gpus/*/information"; cat /proc/driver/nvidia/gpus/*/information 2>&1
	echo "## params (ModifyDeviceFiles, DeviceFile*)"; grep -E "DeviceFile|ModifyDeviceFiles" /proc/driver/nvidia/params 2>&1
} >"$out" 2>&1
echo "== summary"
grep -A3 "^## nvidia-smi" "$out"
grep -A4 "wc -l" "$out"
echo "mig-minors: $(grep -c . /proc/driver/nvidia-caps/mig-minors 2>/dev/null) lines; gpus: $(grep -o '^gpu[0-9]*' /proc/driver/nvidia-caps/mig-minors 2>/dev/null | sort -u | tr '\n' ' ')"
echo "first lines:"; head -12 /proc/driver/nvidia-caps/mig-minors 2>&1
echo "gpu0 gi lines:"; grep -E '^gpu0/gi[0-9]+/access' /proc/driver/nvidia-caps/mig-minors 2>&1 | head -20
echo "gpu0/gi1 ci lines:"; grep -E '^gpu0/gi1/ci' /proc/driver/nvidia-caps/mig-minors 2>&1
echo "last lines:"; tail -3 /proc/driver/nvidia-caps/mig-minors 2>&1
grep -A3 "/proc/devices" "$out"; grep -A8 "^## /dev/nvidia-caps" "$out"
cp /proc/driver/nvidia-caps/mig-minors "${OUT:-.}/mig-minors.txt" 2>/dev/null || true

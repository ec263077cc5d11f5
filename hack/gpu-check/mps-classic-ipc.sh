#!/usr/bin/env bash
# hack/gpu-check/mps-classic-ipc.sh CUDA_ALLOC: what a classic MPS client
# needs of the daemon's pipe directory and /dev/shm, asked of a real driver
# (docs/enforcement.md "Classic MPS: what was verified on a GPU"). Run as
# root on a GPU machine with util-linux's unshare; it starts a private
# classic daemon (its own pipe, log and /dev/shm directories under a
# temporary directory, never /tmp/nvidia-mps), runs the client in
# different mount set-ups, prints one line per case, and quits the daemon.
# It changes no GPU setting. A client is "under MPS" when its pinned
# memory limit (2048 MiB) refused it: a client that cannot reach the
# server runs without MPS (CUDA's fallback) and allocates all it asks.
set -u
alloc="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
ctl="$(command -v nvidia-cuda-mps-control)" || { echo "no nvidia-cuda-mps-control on PATH"; exit 2; }
uuid="$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)"
w="$(mktemp -d /tmp/mps-ipc.XXXXXX)"
pipe="$w/pipe" log="$w/log" shm="$w/shm" other="$w/othershm" ro="$w/pipe-ro"
mkdir -p "$pipe" "$log" "$shm" "$other" "$ro"
chmod 1777 "$shm" "$other"
mount --bind "$pipe" "$ro" && mount -o remount,bind,ro "$ro" || echo "could not make a read-only bind of the pipe directory"

# The daemon sees $shm as its /dev/shm, as the plugin starts it.
unshare -m --propagation private sh -c "mount --bind '$shm' /dev/shm && CUDA_MPS_PIPE_DIRECTORY='$pipe' CUDA_MPS_LOG_DIRECTORY='$log' '$ctl' -d" ||
	{ echo "the daemon did not start"; exit 1; }
sleep 1
echo "after daemon start: pipe=[$(ls -A "$pipe" | tr '\n' ' ')] shm=[$(ls -A "$shm" | tr '\n' ' ')]"

# A client that launches kernels and copies, when PyTorch is there: it
# allocates 256 MiB, computes on it, copies the result back, then asks for
# 3 GiB more, which the 2048 MiB limit must refuse.
torch_client='import torch
x = torch.ones(1 << 26, device="cuda")
s = (x * 2).sum().item()  # 2 * 2^26
try:
    y = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
    over = "allocated"
except torch.OutOfMemoryError:
    over = "refused"
print(f"torch: sum={s:.0f} extra_3GiB={over}")'
py=""
python3 -c 'import torch' 2>/dev/null && py="$(command -v python3)"

# client CASE PIPE SHMDIR: the client in a mount namespace of its own
# with SHMDIR at /dev/shm ("host" leaves the host's /dev/shm, "tmpfs" a
# fresh one).
client() {
	local name="$1" p="$2" s="$3" setup
	case "$s" in
	host) setup=true ;;
	tmpfs) setup="mount -t tmpfs -o size=64m tmpfs /dev/shm" ;;
	*) setup="mount --bind '$s' /dev/shm" ;;
	esac
	local out
	out="$(timeout 60 unshare -m --propagation private sh -c "$setup && CUDA_MPS_PIPE_DIRECTORY='$p' CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='$uuid=2048M' CUDA_VISIBLE_DEVICES='$uuid' '$alloc' 3072" 2>&1)"
	local rc=$?
	echo "case $name: rc=$rc $out"
	if [ -n "$py" ]; then
		out="$(timeout 120 unshare -m --propagation private sh -c "$setup && CUDA_MPS_PIPE_DIRECTORY='$p' CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='$uuid=2048M' CUDA_VISIBLE_DEVICES='$uuid' '$py' -c '$torch_client'" 2>&1 | tail -n 3)"
		echo "  $out"
	fi
	echo "  after: pipe=[$(ls -A "$pipe" | tr '\n' ' ')] shm=[$(ls -A "$shm" | tr '\n' ' ')]"
}
client "rw-pipe+daemon-shm" "$pipe" "$shm"
client "ro-pipe+daemon-shm" "$ro" "$shm"
client "rw-pipe+fresh-tmpfs-shm" "$pipe" tmpfs
client "rw-pipe+other-dir-shm" "$pipe" "$other"
client "rw-pipe+host-shm" "$pipe" host
client "ro-pipe+fresh-tmpfs-shm" "$ro" tmpfs
echo "server log (last 30 lines):"
tail -n 30 "$log/control.log" 2>/dev/null
tail -n 30 "$log/server.log" 2>/dev/null
echo quit | CUDA_MPS_PIPE_DIRECTORY="$pipe" timeout 30 "$ctl"
sleep 2
umount "$ro" 2>/dev/null
pgrep -fa nvidia-cuda-mps || echo "no MPS process left"

#!/usr/bin/env bash
# hack/gpu-check/mps-classic-users.sh CUDA_ALLOC: how a classic MPS daemon
# serves clients of two UIDs at once, with and without -M (legacy
# multi-user), and whether the first client of a fresh server may have a
# /dev/shm of its own; asked of a real driver (docs/enforcement.md
# "Classic MPS: what was verified on a GPU"). Run as root on a GPU machine
# with util-linux (unshare, setpriv). Private directories under a
# temporary directory; changes no GPU setting.
set -u
alloc="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
ctl="$(command -v nvidia-cuda-mps-control)" || { echo "no nvidia-cuda-mps-control on PATH"; exit 2; }
uuid="$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)"
py=""
python3 -c 'import torch' 2>/dev/null && py="$(command -v python3)"
env_of() { echo "CUDA_MPS_PIPE_DIRECTORY=$1 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$uuid=2048M CUDA_VISIBLE_DEVICES=$uuid"; }

run_case() {
	local name="$1" flags="$2"
	local w
	w="$(mktemp -d /tmp/mps-users.XXXXXX)"
	chmod 0755 "$w"
	mkdir -p "$w/pipe" "$w/log" "$w/shm" "$w/own"
	chmod 0777 "$w/pipe" "$w/log"
	chmod 1777 "$w/shm" "$w/own"
	cp "$alloc" "$w/cuda-alloc" && chmod 0755 "$w/cuda-alloc"
	unshare -m --propagation private sh -c "mount --bind '$w/shm' /dev/shm && CUDA_MPS_PIPE_DIRECTORY='$w/pipe' CUDA_MPS_LOG_DIRECTORY='$w/log' '$ctl' -d $flags" ||
		{ echo "$name: the daemon did not start with '$flags'"; return; }
	sleep 1
	# The first client of the fresh server has a /dev/shm of its own and
	# holds its context for 12 s (root).
	local hold
	if [ -n "$py" ]; then
		hold="import torch, time; x = torch.ones(1 << 26, device='cuda'); print('root holder sum', (x * 2).sum().item(), flush=True); time.sleep(12)"
		unshare -m --propagation private sh -c "mount -t tmpfs -o size=64m tmpfs /dev/shm && env $(env_of "$w/pipe") '$py' -c \"$hold\"" >"$w/holder.out" 2>&1 &
	else
		(env $(env_of "$w/pipe") "$alloc" 1024; sleep 12) >"$w/holder.out" 2>&1 &
	fi
	local holder=$!
	sleep 4
	local t0 t1 out
	t0=$(date +%s.%N)
	out="$(timeout 20 setpriv --reuid=1000 --regid=1000 --clear-groups env $(env_of "$w/pipe") "$w/cuda-alloc" 3072 2>&1)"
	local rc=$?
	t1=$(date +%s.%N)
	wait "$holder"
	echo "$name ($ctl -d $flags): uid 1000 client while a root client holds a context: rc=$rc after $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s: $out"
	echo "  root holder (own /dev/shm, first client of the server): $(tr '\n' ' ' <"$w/holder.out" | tail -c 300)"
	grep -h -i "user\|server" "$w/log/control.log" | grep -v "Accepting connection\|valid credentials" | tail -n 8 | sed 's/^/  control.log: /'
	echo quit | CUDA_MPS_PIPE_DIRECTORY="$w/pipe" timeout 30 "$ctl" >/dev/null
	sleep 2
}
run_case "single-user" ""
run_case "multi-user" "-M"
pgrep -fa 'nvidia-cuda-mps-(control|server)' || echo "no MPS process left"

#!/usr/bin/env bash
# ci-no-gpu.sh RUN: on a machine without an NVIDIA GPU (CI), RUN (a built
# bundle's gpu-check/run) must fail at once, with status 2, naming what is
# missing. On a machine with a GPU this says so and checks nothing else.
set -euo pipefail
run="$1"
if compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
	echo "gpu-check-ci: this machine has an NVIDIA GPU; run make gpu-check here instead"
	exit 0
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
start="$(date +%s%N)"
rc=0
"$run" "$out/report" >"$out/stdout" 2>"$out/stderr" || rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
fail() {
	echo "gpu-check-ci: $*" >&2
	sed 's/^/  stderr: /' "$out/stderr" >&2
	exit 1
}
[ "$rc" -eq 2 ] || fail "$run exited $rc on a machine without a GPU, want 2"
[ "$ms" -lt 5000 ] || fail "$run took $ms ms to refuse, want at once"
for want in "cannot run the GPU check" "no /dev/nvidia* device node" "no libnvidia-ml.so.1" "no nvidia-smi"; do
	grep -qF -- "$want" "$out/stderr" || fail "the message does not say \"$want\""
done
[ ! -e "$out/report" ] || fail "$run created $out/report although it refused"
echo "gpu-check-ci: $run refused in $ms ms, naming the missing GPU, driver and nvidia-smi"

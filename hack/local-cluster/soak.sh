#!/usr/bin/env bash
# Churn-and-crash soak of the kubelet plugin on the local cluster: waves of
# pods with whole cards and memory shares are created and deleted for
# SOAK_SECONDS while the plugin (the chart's DaemonSet pod, chart.sh) is
# killed (SIGKILL of its container's process; the kubelet restarts it) at
# random moments, some of them in the middle of a prepare or an unprepare,
# and the API server is restarted once; then an independent audit compares
# what the plugin keeps on disk (the chart's host paths) with what the API
# server holds. A `make test` stage (test-soak).
#   soak.sh            audit self-test, cluster up, chart, soak, audit, cluster down
# Settings (environment):
#   SOAK_SECONDS      how long waves are created, at least (default 300)
#   SOAK_KILLS        plugin kills to inject, at least (default 10)
#   SOAK_MIN_CLAIMS   claims to create, at least (default 200)
#   SOAK_WAVE_WHOLE   whole-card pods per wave (default 2)
#   SOAK_WAVE_SHARES  share pods per wave (default 30)
#   SOAK_SHARE_MEMORY memory of one share (default 1Gi)
#   SOAK_MAX_SECONDS  waves stop after this long whatever the counts (default 390,
#                     so that the stage stays within 10 minutes)
# Up to three waves hold cards at once (one terminating, one running, one
# starting): with the defaults 6 whole cards and 90 1Gi shares, within the
# 8 80Gi cards of the dgx-h100 profile.
#   KEEP_CLUSTER=1    leave the cluster running afterwards
#   SOAK_PLANT=1      plant an orphan CDI spec and an orphan per-claim
#                     directory before the audits: the run must fail, naming
#                     both (shows the stage can fail on a real cluster)
# Prints: claims prepared, faults injected, minutes, problems (must be 0).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HERE="$(dirname "${BASH_SOURCE[0]}")"
source "$HERE/config.sh" # PAUSE_IMAGE
cluster_lock

SOAK_SECONDS="${SOAK_SECONDS:-300}"
SOAK_KILLS="${SOAK_KILLS:-10}"
MIN_CLAIMS="${SOAK_MIN_CLAIMS:-200}"
WAVE_WHOLE="${SOAK_WAVE_WHOLE:-2}"
WAVE_SHARES="${SOAK_WAVE_SHARES:-30}"
SHARE_MEMORY="${SOAK_SHARE_MEMORY:-1Gi}"
# The stage must stay within 10 minutes whatever the machine.
MAX_SECONDS="${SOAK_MAX_SECONDS:-390}"
# How long a wave may take to run: a pod whose prepare met a killed plugin
# is retried at the kubelet's next sync of it.
WAVE_TIMEOUT=150
NS=tangram-soak
CHECKPOINT="$PLUGIN_STATE_DIR/checkpoint.json"
# Every plugin container's log in turn (follow_plugin_logs).
PLUGIN_LOG="$LOG_DIR/tangram-plugin.log"
SAVED_LOGS="$CACHE_ROOT/soak-logs"
# The kubelet restarts the killed plugin container within 2 s, however
# often it was killed before (its default backoff grows to 5 minutes).
export TANGRAM_KUBELET_MAX_RESTART_PERIOD=2s
# The kubelet retries a failed prepare when it syncs the pod again: every
# 10 s instead of every minute, so a kill delays a wave by seconds.
export TANGRAM_KUBELET_SYNC_FREQUENCY=10s
WORK="$(mktemp -d)"
K() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

problems=0
problem() {
	problems=$((problems + 1))
	printf 'PROBLEM: %s\n' "$*" >&2
	printf '%s\n' "$*" >>"$WORK/problems"
}

finish() {
	local rc=$?
	set +o errexit
	if [ -n "${injector_pid:-}" ]; then
		touch "$WORK/stop"
		wait "$injector_pid"
	fi
	stop_following_logs
	# The next cluster-up empties the log directory: keep this run's logs.
	mkdir -p "$SAVED_LOGS"
	cp "$LOG_DIR"/tangram-plugin.log "$LOG_DIR"/kubelet.log "$SAVED_LOGS"/ 2>/dev/null
	cp "$WORK"/faults "$WORK"/problems "$SAVED_LOGS"/ 2>/dev/null
	info "logs of this soak kept in $SAVED_LOGS"
	down_unless_kept "$HERE/down.sh"
	rm -rf "$WORK"
	exit $rc
}
trap finish EXIT

# pod NAME KIND: a pause pod with its own claim from template KIND.
pod() {
	cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $NS
  labels: {soak: "yes"}
spec:
  # 0: the pod object goes at once, the kubelet tears the pod down later,
  # and the scheduler may give its card to the next wave meanwhile; the
  # plugin must refuse that claim until the old one is unprepared.
  terminationGracePeriodSeconds: 0
  # No pod network: thirty sandboxes a wave start faster, and the soak is
  # about claims.
  hostNetwork: true
  # Not nodeName: the scheduler must allocate the claim.
  nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
  tolerations: [{operator: Exists}]
  # Locked down, as the chart requires of a strict class's shares
  # (admissionPolicy.sharedGPURunAsNonRoot), whichever class the soak uses.
  securityContext: {runAsNonRoot: true, runAsUser: 65534}
  containers:
  - name: c
    image: $PAUSE_IMAGE
    imagePullPolicy: IfNotPresent
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    resources:
      claims: [{name: gpu}]
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: $2
---
EOF
}

templates() {
	cat <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: whole, namespace: $NS}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.tangram.dev}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: share, namespace: $NS}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: shared-gpu.tangram.dev
          capacity: {requests: {memory: $SHARE_MEMORY}}
EOF
}

# follow_plugin_logs: append the log of each plugin container, one after the
# other as the kubelet restarts them, to $PLUGIN_LOG (a dead container's log
# goes with it when the kubelet removes it). `crictl logs -f` returns a few
# seconds after its container died; the next one is read from its start.
follow_plugin_logs() {
	local id last=""
	while [ ! -e "$WORK/stop-logs" ]; do
		id="$(plugin_containers 2>/dev/null | head -n 1)"
		if [ -n "$id" ] && [ "$id" != "$last" ]; then
			last="$id"
			CRI logs -f "$id" >>"$PLUGIN_LOG" 2>&1 || true
		else
			sleep 0.2
		fi
	done
}

# stop_following_logs: end follow_plugin_logs and the crictl it runs.
stop_following_logs() {
	[ -n "${follower_pid:-}" ] || return 0
	touch "$WORK/stop-logs"
	pkill -TERM -P "$follower_pid" 2>/dev/null
	wait "$follower_pid" 2>/dev/null
	follower_pid=""
}

# kill_plugin MODE: SIGKILL the plugin; MODE says when: "random" (now),
# "prepare" or "unprepare" (right after the plugin logged a
# NodePrepareResources / NodeUnprepareResources call, so that the calls of
# the same burst the kubelet sent with it are in flight; waits up to 20 s
# for one, then kills anyway and counts it as random).
kill_plugin() {
	local mode="$1" method offset i
	case "$mode" in
	prepare) method=NodePrepareResources ;;
	unprepare) method=NodeUnprepareResources ;;
	esac
	if [ -n "${method:-}" ]; then
		offset="$(stat -c %s "$PLUGIN_LOG")"
		for ((i = 0; i < 200; i++)); do
			# grep -c reads to the end (grep -q would SIGPIPE tail; pipefail).
			tail -c "+$((offset + 1))" "$PLUGIN_LOG" | grep -c "$method" >/dev/null && break
			[ -e "$WORK/stop" ] && return 0
			sleep 0.1
		done
		[ "$i" -lt 200 ] || mode=random
	fi
	log "FAULT: killing the plugin (kill $((kills + 1)), $mode)"
	"$HERE/chart.sh" kill-plugin || true
	echo "kill $mode" >>"$WORK/faults"
	kills=$((kills + 1))
}

# The fault injector: SIGKILL the plugin at random moments, a third of them
# mid-prepare and a third mid-unprepare; the kubelet restarts its container
# within 2 s and the next fault waits until it is Ready again; between kills
# the plugin runs 4-15 s (plus up to 20 s waiting for a call to interrupt),
# so it is up most of the time. The API server is restarted once, half-way.
inject_faults() {
	local kills=0 api_done=0 start pid args modes=(random prepare unprepare)
	start="$(now_s)"
	# Ends between faults when asked (the stop file): never with the plugin
	# half-started.
	while [ ! -e "$WORK/stop" ]; do
		sleep "$((4 + RANDOM % 12))"
		[ -e "$WORK/stop" ] && break
		if [ "$api_done" = 0 ] && [ $(($(now_s) - start)) -ge $((SOAK_SECONDS / 2)) ]; then
			pid="$(proc_pid kube-apiserver)"
			# Started again with exactly the arguments up.sh gave it.
			mapfile -d '' args <"/proc/$pid/cmdline"
			log "FAULT: restarting kube-apiserver"
			stop_proc kube-apiserver 10 || true
			start_proc kube-apiserver "${args[@]}" || true
			wait_until kube-apiserver 180 "kube-apiserver is ready again" K get --raw /readyz || true
			echo api >>"$WORK/faults"
			api_done=1
			continue
		fi
		kill_plugin "${modes[kills % 3]}"
		# A plugin slow to come back (a loaded machine) is shown, and waited
		# for once more.
		"$HERE/chart.sh" wait-plugin 60 >"$WORK/plugin-start" 2>&1 || { tail -n 5 "$WORK/plugin-start" >&2; "$HERE/chart.sh" wait-plugin 120 || true; }
	done
}

# wait_running WAVE: every pod of the wave runs; the others are problems.
wait_running() {
	local wave="$1" i phases notrunning
	for ((i = 0; i < WAVE_TIMEOUT; i++)); do
		phases="$(K -n "$NS" get pods -l "wave=$wave" -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}' 2>/dev/null || true)"
		notrunning="$(grep -v '=Running$' <<<"$phases" | grep . || true)"
		if [ -n "$phases" ] && [ -z "$notrunning" ]; then
			grep -c . <<<"$phases" >>"$WORK/ran"
			return 0
		fi
		sleep 1
	done
	while read -r p; do problem "wave $wave: pod ${p%%=*} did not run in ${WAVE_TIMEOUT}s (phase ${p#*=})"; done <<<"$notrunning"
	grep -c '=Running$' <<<"$phases" >>"$WORK/ran" || true
}

# audit WHEN: what the plugin keeps must match the API server
# (soak-audit.py). Deleted pods are unprepared a little after they vanish,
# so a mismatch counts only if it is still there after 60 s.
audit() {
	local when="$1" deadline
	deadline=$(($(now_s) + 60))
	while [ "$(now_s)" -lt "$deadline" ]; do
		if K get resourceclaims -A -o json >"$WORK/claims.json" 2>/dev/null &&
			K get resourceslices -o json >"$WORK/slices.json" 2>/dev/null &&
			python3 "$HERE/soak-audit.py" "$CHECKPOINT" "$CDI_DIR" "$NODE_NAME" "$WORK/claims.json" "$WORK/slices.json" \
				"$PLUGIN_STATE_DIR" "$PLUGIN_MPS_ROOT" >"$WORK/audit"; then
			[ -s "$WORK/audit" ] || { info "audit $when: checkpoint, CDI specs, per-claim entries and API server agree; no card over capacity"; return 0; }
		fi
		sleep 1
	done
	while read -r line; do problem "audit $when: $line"; done <"$WORK/audit"
	[ -s "$WORK/audit" ] || problem "audit $when: could not run (API server or soak-audit.py failed)"
}

stage_start="$(now_s)"
# The audit must be able to fail: its own test plants each problem first.
log "soak-audit.py self-test"
python3 "$HERE/soak_audit_test.py" 2>&1 | tail -n 3 >&2 || die "soak_audit_test.py failed: the audit cannot be trusted"
"$HERE/up.sh"
"$HERE/chart.sh" install
: >"$PLUGIN_LOG"
log_offset=0
follow_plugin_logs &
follower_pid=$!
K create namespace "$NS" >/dev/null
templates | K apply -f - >/dev/null
log "soak: waves of $WAVE_WHOLE whole-card and $WAVE_SHARES share pods for ${SOAK_SECONDS}s and at least $MIN_CLAIMS claims, plugin killed at least $SOAK_KILLS times, API server restarted once"

: >"$WORK/faults"
: >"$WORK/ran"
: >"$WORK/problems"
inject_faults &
injector_pid=$!
soak_start="$(now_s)"
wave=0 created=0
while { [ $(($(now_s) - soak_start)) -lt "$SOAK_SECONDS" ] || [ "$(grep -c kill "$WORK/faults")" -lt "$SOAK_KILLS" ] ||
	[ "$created" -lt "$MIN_CLAIMS" ]; } && [ $(($(now_s) - soak_start)) -lt "$MAX_SECONDS" ]; do
	wave=$((wave + 1))
	{
		for ((i = 0; i < WAVE_WHOLE; i++)); do pod "w$wave-whole-$i" whole; done
		for ((i = 0; i < WAVE_SHARES; i++)); do pod "w$wave-share-$i" share; done
	} | sed "s/soak: \"yes\"/soak: \"yes\", wave: \"$wave\"/" >"$WORK/wave.yaml"
	# The API server may be restarting: retry the create.
	for ((i = 0; i < 60; i++)); do K apply -f "$WORK/wave.yaml" >/dev/null 2>"$WORK/apply-error" && break; sleep 2; done
	[ "$i" -lt 60 ] || problem "wave $wave: kubectl apply kept failing for 120s: $(tail -n 1 "$WORK/apply-error")"
	created=$((created + WAVE_WHOLE + WAVE_SHARES))
	wave_start="$(now_s)"
	wait_running "$wave"
	info "wave $wave: $((WAVE_WHOLE + WAVE_SHARES)) pods running after $(elapsed "$wave_start") ($created claims, $(grep -c kill "$WORK/faults") kills, $(elapsed "$soak_start") of churn)"
	# The previous wave goes while this one runs: prepares and unprepares
	# overlap, and the kills hit both.
	if [ "$wave" -gt 1 ]; then
		for ((i = 0; i < 60; i++)); do
			K -n "$NS" delete pods -l "wave=$((wave - 1))" --wait=false >/dev/null 2>&1 && break
			sleep 2
		done
	fi
done
touch "$WORK/stop"
wait "$injector_pid" || true
injector_pid=""
soak_end="$(now_s)"
"$HERE/chart.sh" wait-plugin

if [ "${SOAK_PLANT:-}" = 1 ]; then
	planted="$(cat /proc/sys/kernel/random/uuid)"
	log "SOAK_PLANT: planting an orphan CDI spec and per-claim directory for claim $planted"
	echo '{}' >"$CDI_DIR/k8s.gpu.tangram.dev-claim_$planted.json"
	mkdir -p "$PLUGIN_MPS_ROOT/$planted"
fi

# Audit 1, with the last wave running: the checkpoint and the CDI specs hold
# exactly the prepared claims, no card is over capacity or shared with a
# whole-card claim.
for ((i = 0; i < 120; i++)); do
	[ "$(K -n "$NS" get pods -o name | grep -c .)" -le $((WAVE_WHOLE + WAVE_SHARES)) ] && break
	sleep 1
done
wait_running "$wave"
# The pods of the last wave run, so their claims are prepared: the audit
# needs no settling time for them, only for the deleted ones (above).
audit "with the last wave running"
# Audit 2, after the last wave: nothing left behind.
K delete namespace "$NS" --wait=true --timeout=300s >/dev/null || problem "namespace $NS not deleted in 300s"
audit "after the namespace is deleted"

faults="$(grep -c . "$WORK/faults" || true)"
# Claims the plugin logged as prepared in this run (a claim prepared again
# after a kill counts once).
prepared="$(tail -c "+$((log_offset + 1))" "$PLUGIN_LOG" | grep '"Prepared"' | grep -o 'claimUID="[^"]*"' | sort -u | grep -c . || true)"
ran="$(awk '{s += $1} END {print s + 0}' "$WORK/ran")"
# The last wave was counted twice (before and at the audit).
ran=$((ran - WAVE_WHOLE - WAVE_SHARES))
[ "$ran" -eq "$created" ] || problem "$created pods created, $ran ran"
[ "$prepared" -ge "$created" ] || problem "the plugin logged $prepared claims prepared, $created were created"
[ "$created" -ge "$MIN_CLAIMS" ] || problem "only $created claims in ${MAX_SECONDS}s, want at least $MIN_CLAIMS"
[ "$(grep -c kill "$WORK/faults" || true)" -ge "$SOAK_KILLS" ] || problem "only $(grep -c kill "$WORK/faults" || true) plugin kills, want $SOAK_KILLS"
grep -q api "$WORK/faults" || problem "the API server was not restarted"
log "soak figures"
info "claims prepared: $prepared of $created created (pods that ran: $ran, waves: $wave)"
info "faults injected: $faults ($(grep -c kill "$WORK/faults" || true) plugin kills: $(grep -c 'kill random' "$WORK/faults" || true) at random, $(grep -c 'kill prepare' "$WORK/faults" || true) mid-prepare, $(grep -c 'kill unprepare' "$WORK/faults" || true) mid-unprepare; $(grep -c api "$WORK/faults" || true) API server restart)"
# With a grace period of 0 a deleted pod is gone from the API server at
# once, so its claim can be allocated again while the kubelet still tears
# the pod down; the plugin refuses the new claim until the old one is
# unprepared, and the kubelet retries. Counted, not a problem.
refusals="$(tail -c "+$((log_offset + 1))" "$PLUGIN_LOG" | grep -c 'refusing to give\|refusing a share' || true)"
info "prepares refused because the card's previous claim was not yet unprepared (retried by the kubelet): $refusals"
info "minutes: $(awk -v s=$((soak_end - soak_start)) 'BEGIN {printf "%.1f", s / 60}') of churn, $(awk -v s=$(($(now_s) - stage_start)) 'BEGIN {printf "%.1f", s / 60}') in all"
info "problems: $problems"
if [ "$problems" -ne 0 ]; then
	log "problems found"
	sed 's/^/    /' "$WORK/problems" >&2
	die "soak found $problems problems"
fi
log "soak passed"

# Prepare benchmarks and the kubelet plugin's idle memory (see docs/prepare.md).

# Where the benchmarks keep the checkpoint and CDI specs: fsync cost depends
# on this file system (tmpfs makes fsync free).
BENCH_STATE_DIR ?= /var/tmp
# Prepares per benchmark; the percentiles need at least 100 samples.
BENCH_PREPARES ?= 200
# How long the plugin idles before its RSS is read.
BENCH_IDLE_SECONDS ?= 10

.PHONY: bench bench-prepare bench-rss bench-usage
bench: bench-prepare bench-rss bench-usage ## prepare latency (1 claim, calls of 2 and 8 claims; fsync included), the plugin's idle RSS, a usage round's cost

bench-prepare: ## p50/p99 prepare latency through the real checkpoint (fsync) and CDI stores
	@echo "==> prepare latency, state on $(BENCH_STATE_DIR) ($$(df --output=fstype $(BENCH_STATE_DIR) | tail -1))"
	TMPDIR=$(BENCH_STATE_DIR) $(GO) test -run '^$$' -bench 'BenchmarkDurableReplaceFloor|BenchmarkPrepareOneClaim|BenchmarkPrepareBatch' -benchtime $(BENCH_PREPARES)x ./pkg/plugin/

bench-usage: ## one round of the GPU usage watcher on 8 cards and 50 shares (/proc reads included, NVML and the API server not)
	TMPDIR=$(BENCH_STATE_DIR) $(GO) test -run '^$$' -bench 'BenchmarkWatcherRound' -benchtime 200x ./pkg/plugin/usage/

bench-rss: ## idle RSS of the real binary: run --offline with the dgx-h100 fake profile, read /proc/<pid>/status
	@mkdir -p $(BIN_DIR)
	$(GO) build -o $(BIN_DIR)/dra-kubelet-plugin ./cmd/dra-kubelet-plugin
	@# Drop the freshly written binary from the page cache, so it is read back
	@# like a deployed one: pages left by the linker's writes are mapped in
	@# large folios and inflate RssFile by ~20 MiB (see docs/prepare.md).
	@dd if=$(BIN_DIR)/dra-kubelet-plugin iflag=nocache count=0 status=none
	@dir=$$(mktemp -d); \
	$(BIN_DIR)/dra-kubelet-plugin run --offline --node-name bench --fake-profile dgx-h100 \
	  --cdi-root $$dir/cdi --state-dir $$dir/state --mps-root $$dir/mps \
	  --healthz-address 127.0.0.1:0 --metrics-address 127.0.0.1:0 >$$dir/log 2>&1 & pid=$$!; \
	sleep $(BENCH_IDLE_SECONDS); \
	if ! kill -0 $$pid 2>/dev/null; then echo "plugin exited early:"; cat $$dir/log; rm -rf $$dir; exit 1; fi; \
	echo "==> idle plugin (pid $$pid) after $(BENCH_IDLE_SECONDS)s, binary on $$(df --output=fstype $(BIN_DIR) | tail -1):"; \
	grep -E '^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM)' /proc/$$pid/status; \
	kill -TERM $$pid; wait $$pid; rm -rf $$dir

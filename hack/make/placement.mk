# Placement: trace simulator and the policy benchmark (docs/placement.md).
TRACES_DIR ?= $(CURDIR)/../shared/traces/openb
BENCH_SEEDS ?= 10
BENCH_PARALLEL ?= 2

.PHONY: tangram-sim
tangram-sim: ## build the trace simulator into ./bin
	@mkdir -p $(BIN_DIR)
	$(GO) build -o $(BIN_DIR)/tangram-sim ./cmd/tangram-sim

.PHONY: test-placement
test-placement: ## unit tests of pkg/placement and pkg/trace (race detector on)
	$(GO) test -race -count=1 ./pkg/placement/... ./pkg/trace/...

# hack/bench-placement is a nested module: its chart library (gonum/plot,
# with fonts and PDF) stays out of the driver's go.mod.
.PHONY: bench-placement
bench-placement: ## every policy x openb list x 10 seeds -> docs/placement-results.{md,png} (~15 min on 2 cores)
	cd hack/bench-placement && $(GO) run . --traces $(abspath $(TRACES_DIR)) --seeds $(BENCH_SEEDS) --parallel $(BENCH_PARALLEL) \
	  --markdown $(CURDIR)/docs/placement-results.md --plot $(CURDIR)/docs/placement-results.png

# tangram-scheduler is a nested module (k8s.io/kubernetes stays out of the
# driver's module); its build is heavy.
.PHONY: tangram-scheduler
tangram-scheduler: ## build kube-scheduler 1.37 with the TangramPacking and TangramPreemption plugins into ./bin (nested module)
	@mkdir -p $(BIN_DIR)
	cd cmd/tangram-scheduler && $(STATIC_ENV) $(GO) build -o $(BIN_DIR)/tangram-scheduler .

# The tangram-scheduler module is vetted and tested in the static mode of
# hack/gomodes.sh (GO_STATIC, STATIC_ENV in the Makefile), as its
# image and the local cluster's Kubernetes are built: the Go build cache
# compiles the scheduler and the API server once for all of them. Not under
# -race: the plugins' concurrent state (pkg/placement/clusterstate,
# pkg/preemption.EvictedPods) lives in this module, where make unit runs its
# concurrent tests under the race detector; the target fails when the module
# grows cgo code, locks, atomics or goroutines of its own (docs/testing.md,
# issue 43).
SCHED_FORBIDDEN = ^import "C"|^//go:build.*cgo|"sync/atomic"|sync\.(Mutex|RWMutex|Map|WaitGroup|Cond)|^[[:space:]]*go (func|[a-zA-Z_.]+\()

.PHONY: test-tangram-scheduler
test-tangram-scheduler: ## tests of the scheduler plugins (nested module, without cgo as its image; its concurrent state lives in pkg/ and runs under -race in make unit, docs/testing.md)
	@if grep -nE --include='*.go' --exclude='*_test.go' '$(SCHED_FORBIDDEN)' -r cmd/tangram-scheduler; then \
		echo "cgo, locks, atomics or goroutines in cmd/tangram-scheduler (above): its tests run without -race and without cgo;"; \
		echo "put concurrent state in a package of this module (as pkg/placement/clusterstate) where make unit races it (docs/testing.md)"; exit 1; fi
	cd cmd/tangram-scheduler && $(GO_STATIC) vet ./... && $(GO_STATIC) test -count=1 ./...

# Scheduler throughput: stock kube-scheduler vs tangram-scheduler on an API
# server and etcd of the benchmark's own (ports 23790/16443, not the local
# cluster's), binaries from the local cluster's cache (built if missing).
BENCH_SCHED_NODES ?= 100,1213
BENCH_SCHED_PODS ?= 2000
BENCH_SCHED_RUNS ?= 3
BENCH_SCHED_DIR ?= $(HOME)/.cache/tangram/bench-scheduler

.PHONY: bench-scheduler
bench-scheduler: tangram-scheduler ## pods/s of stock kube-scheduler vs tangram-scheduler at 100 and 1213 nodes, median of 3 (~45 min on a busy 2-core machine; BENCH_SCHED_RUNS=1 ~15 min)
	hack/local-cluster/build-binaries.sh kube etcd
	@source hack/local-cluster/lib.sh && \
	$(GO) run ./hack/bench-scheduler --nodes $(BENCH_SCHED_NODES) --pods $(BENCH_SCHED_PODS) --runs $(BENCH_SCHED_RUNS) \
	  --kube-bin "$$KUBE_BIN" --etcd "$$ETCD_BIN/etcd" --tangram-scheduler $(BIN_DIR)/tangram-scheduler \
	  --traces $(TRACES_DIR) --work-dir $(BENCH_SCHED_DIR)

# Scheduling throughput with Kubernetes' own benchmark (scheduler_perf
# v1.37.0, in-process API server, etcd on PATH): the stock profile vs
# tangram-scheduler's on upstream's DRA workloads and on Tangram's slices
# (docs/placement.md, "Scheduler throughput"). Empty variables keep the
# benchmark's defaults; "none" selects no workload of that source.
BENCH_PERF_RUNS ?= 3
BENCH_PERF_UPSTREAM ?=
BENCH_PERF_TANGRAM ?=
BENCH_PERF_DURATION ?=
# sequential (default: stock and tangram one after the other, alternating) or
# simultaneous (both at once in two processes: load from elsewhere falls on both).
BENCH_PERF_MODE ?=
BENCH_PERF_OUT ?= $(HOME)/.cache/tangram/bench-scheduler-perf
# Extra flags of the harness, e.g. -perf-cpuprofile (profiles land in $(BENCH_PERF_OUT)/data-items).
BENCH_PERF_ARGS ?=

.PHONY: bench-scheduler-perf
bench-scheduler-perf: ## scheduler_perf: stock vs tangram-scheduler pods/s on upstream's DRA workloads and Tangram's slices, median of 3 (~25 min on 2 cores)
	@echo "==> etcd for the harness (built once into ~/.cache/tangram by the local cluster's script)"
	@hack/local-cluster/build-binaries.sh etcd
	@mkdir -p $(BENCH_PERF_OUT) && rm -rf $(BENCH_PERF_OUT)/data-items $(BENCH_PERF_OUT)/artifacts && mkdir -p $(BENCH_PERF_OUT)/artifacts
	@echo "==> building and running BenchmarkPerfScheduling (cmd/tangram-scheduler/internal/schedperf; the first build takes minutes); full log: $(BENCH_PERF_OUT)/bench.log"
	@set -o pipefail; source hack/local-cluster/lib.sh && export PATH="$$ETCD_BIN:$$PATH" && \
	  cd cmd/tangram-scheduler && \
	  TANGRAM_K8S_DIR="$$($(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)" \
	  TANGRAM_PERF_OUT=$(BENCH_PERF_OUT) TANGRAM_PERF_RUNS=$(BENCH_PERF_RUNS) \
	  TANGRAM_PERF_OPENB_NODES=$(abspath $(TRACES_DIR))/openb_node_list_gpu_node.csv \
	  $(if $(BENCH_PERF_UPSTREAM),TANGRAM_PERF_UPSTREAM=$(BENCH_PERF_UPSTREAM)) \
	  $(if $(BENCH_PERF_TANGRAM),TANGRAM_PERF_TANGRAM=$(BENCH_PERF_TANGRAM)) \
	  $(if $(BENCH_PERF_DURATION),TANGRAM_PERF_DURATION=$(BENCH_PERF_DURATION)) \
	  $(if $(BENCH_PERF_MODE),TANGRAM_PERF_MODE=$(BENCH_PERF_MODE)) \
	  ARTIFACTS=$(BENCH_PERF_OUT)/artifacts \
	  $(GO) test -run '^$$' -bench '^BenchmarkPerfScheduling$$' -benchtime=1x -timeout 90m ./internal/schedperf/ $(if $(BENCH_PERF_ARGS),-args $(BENCH_PERF_ARGS)) 2>&1 \
	  | tee $(BENCH_PERF_OUT)/bench.log | grep --line-buffered -E '^(schedperf:|FAIL|--- FAIL|panic)'
	@cat $(BENCH_PERF_OUT)/table.md

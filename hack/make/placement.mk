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
	cd cmd/tangram-scheduler && $(GO) build -o $(BIN_DIR)/tangram-scheduler .

.PHONY: test-tangram-scheduler
test-tangram-scheduler: ## tests of the scheduler plugins (nested module, race detector on)
	cd cmd/tangram-scheduler && $(GO) vet ./... && $(GO) test -race -count=1 ./...

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

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

.PHONY: bench-placement
bench-placement: ## every policy x openb list x 10 seeds -> docs/placement-results.{md,png} (~15 min on 2 cores)
	$(GO) run ./hack/bench-placement --traces $(TRACES_DIR) --seeds $(BENCH_SEEDS) --parallel $(BENCH_PARALLEL) \
	  --markdown docs/placement-results.md --plot docs/placement-results.png

# tangram-scheduler is a nested module (k8s.io/kubernetes stays out of the
# driver's module); its build is heavy.
.PHONY: tangram-scheduler
tangram-scheduler: ## build kube-scheduler 1.37 with the TangramPacking and TangramPreemption plugins into ./bin (nested module)
	@mkdir -p $(BIN_DIR)
	cd cmd/tangram-scheduler && $(GO) build -o $(BIN_DIR)/tangram-scheduler .

.PHONY: test-tangram-scheduler
test-tangram-scheduler: ## tests of the scheduler plugins (nested module, race detector on)
	cd cmd/tangram-scheduler && $(GO) vet ./... && $(GO) test -race -count=1 ./...

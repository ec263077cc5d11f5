# kubectl-tangram: the cluster view plugin (pkg/clusterview, pkg/diagnosis).
# See docs/kubectl-tangram.md.

.PHONY: kubectl-tangram
kubectl-tangram: ## build bin/kubectl-tangram (static; put it on PATH to run `kubectl tangram`)
	@mkdir -p $(BIN_DIR)
	CGO_ENABLED=0 $(GO) build -ldflags="-s -w" -o $(BIN_DIR)/kubectl-tangram ./cmd/kubectl-tangram

.PHONY: update-golden-view
update-golden-view: ## rewrite the golden output of status/describe/top after an intended change
	$(GO) test -count=1 ./pkg/clusterview/ ./pkg/clusterview/describe/ ./pkg/clusterview/usageview/ -update

.PHONY: bench-view
bench-view: ## benchmarks: view and diagnosis on 100 fake DGX nodes
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/clusterview/ ./pkg/diagnosis/

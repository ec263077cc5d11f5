# GPU inventory (pkg/gpu). go-nvml only compiles with cgo, so the NVML
# source is split by build tag; this checks the CGO_ENABLED=0 side that
# release images use (the default `make unit` run covers the cgo side).

.PHONY: gpu-nocgo
gpu-nocgo: ## build and test pkg/gpu with CGO_ENABLED=0, as release images are built
	CGO_ENABLED=0 $(GO) vet ./pkg/gpu/...
	CGO_ENABLED=0 $(GO) test -count=1 ./pkg/gpu/...

.PHONY: gpu-bench
gpu-bench: ## benchmarks of profile parsing and the NVML reader (mock)
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/gpu/...

.PHONY: gpu-acceptance
gpu-acceptance: ## on a real GPU node with the chart installed: plugin slices vs nvidia-smi, a pod per claim shape, a report (docs/nvml.md); fails at once without a GPU
	@hack/gpu-acceptance/run.sh

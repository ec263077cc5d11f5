# GPU inventory (pkg/gpu), the real-GPU checks and the GPU check bundle.
# (The CGO_ENABLED=0 side of pkg/gpu: unit-nocgo-node in config.mk.)

.PHONY: bench-gpu
bench-gpu: ## benchmarks of profile parsing and the NVML reader (mock)
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/gpu/...

.PHONY: gpu-acceptance
gpu-acceptance: ## on a real GPU node with the chart installed: plugin slices vs nvidia-smi, a pod per claim shape, a report (docs/nvml.md); fails at once without a GPU
	@hack/gpu-acceptance/run.sh

# The acceptance check of a bare GPU node before installing
# (docs/nvml.md#gpu-check-before-installing): a folder built here, carried
# to the GPU machine and run there; it needs no Kubernetes and no Go there.
GPU_CHECK_BUNDLE ?= $(BIN_DIR)/gpu-check
GPU_CHECK_OUT ?= $(CURDIR)/_output/gpu-check

.PHONY: gpu-check-bundle
gpu-check-bundle: ## build bin/gpu-check, the self-contained GPU check (<= 60 MiB) to copy to a GPU node and run there as gpu-check/run OUTDIR
	@hack/gpu-check/build.sh $(GPU_CHECK_BUNDLE)

.PHONY: gpu-check
gpu-check: ## run the GPU check on this machine (a GPU node, as root); fails at once without a GPU
	@hack/gpu-check/run --preflight
	@$(MAKE) --no-print-directory gpu-check-bundle
	@$(GPU_CHECK_BUNDLE)/run $(GPU_CHECK_OUT)

# CI: build the bundle (size checked) and run its entry script here, over
# driver roots without a GPU, where it must refuse at once and say which
# GPU parts are missing (the Go test of hack/gpu-check, on the bundle's copy).
.PHONY: gpu-check-ci
gpu-check-ci: gpu-check-bundle ## CI stage: build the bundle, then check that its run refuses at once without a GPU, naming what is missing
	GPU_CHECK_RUN=$(abspath $(GPU_CHECK_BUNDLE))/run $(GO_STATIC) test -count=1 -run '^TestRunRefusesAtOnceWithoutGPU$$' ./hack/gpu-check/

# Opaque config API, config resolution, CDI specs, the checkpoint and the
# GPU inventory (api/, pkg/config, pkg/plugin/cdi, pkg/plugin/checkpoint,
# pkg/gpu): fuzzing, benchmarks, and their CGO_ENABLED=0 side.

# The node's packages whose NVML and nvcdi code is behind cgo build tags.
NOCGO_NODE_PKGS := ./api/gpu/... ./pkg/config/... ./pkg/plugin/cdi/... ./pkg/plugin/checkpoint/... ./pkg/gpu/...
FUZZTIME ?= 30s

.PHONY: fuzz-gpuconfig
fuzz-gpuconfig: ## fuzz the GpuConfig decoder for FUZZTIME (default 30s)
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeGpuConfig$$' -fuzztime $(FUZZTIME) ./api/gpu/v1alpha1/

.PHONY: fuzz-checkpoint
fuzz-checkpoint: ## fuzz checkpoint loading for FUZZTIME each: whole files, then claim payloads behind a valid checksum
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./pkg/plugin/checkpoint/
	$(GO) test -run '^$$' -fuzz '^FuzzLoadClaims$$' -fuzztime $(FUZZTIME) ./pkg/plugin/checkpoint/

.PHONY: unit-nocgo-node
unit-nocgo-node: ## vet and test the node packages split by cgo tags (GPU inventory, config, CDI, checkpoint) with CGO_ENABLED=0: NVML and nvcdi fall back
	CGO_ENABLED=0 $(GO) vet $(NOCGO_NODE_PKGS)
	CGO_ENABLED=0 $(GO) test -count=1 $(NOCGO_NODE_PKGS)

.PHONY: bench-checkpoint
bench-checkpoint: ## checkpoint Save (with fsync) and Load benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/plugin/checkpoint/

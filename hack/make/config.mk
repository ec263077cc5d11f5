# Opaque config API, config resolution, CDI specs and the checkpoint
# (api/, pkg/config, pkg/plugin/cdi, pkg/plugin/checkpoint).

CONFIG_PKGS := ./api/gpu/... ./pkg/config/... ./pkg/plugin/cdi/... ./pkg/plugin/checkpoint/...
FUZZTIME ?= 30s

.PHONY: config-fuzz
config-fuzz: ## fuzz the GpuConfig decoder for FUZZTIME (default 30s)
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeGpuConfig$$' -fuzztime $(FUZZTIME) ./api/gpu/v1alpha1/

.PHONY: checkpoint-fuzz
checkpoint-fuzz: ## fuzz checkpoint loading for FUZZTIME each: whole files, then claim payloads behind a valid checksum
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./pkg/plugin/checkpoint/
	$(GO) test -run '^$$' -fuzz '^FuzzLoadClaims$$' -fuzztime $(FUZZTIME) ./pkg/plugin/checkpoint/

.PHONY: config-nocgo
config-nocgo: ## vet and test config/CDI/checkpoint packages with CGO_ENABLED=0 (nvcdi falls back)
	CGO_ENABLED=0 $(GO) vet $(CONFIG_PKGS)
	CGO_ENABLED=0 $(GO) test -count=1 $(CONFIG_PKGS)

.PHONY: checkpoint-bench
checkpoint-bench: ## checkpoint Save (with fsync) and Load benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/plugin/checkpoint/

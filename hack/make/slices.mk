# ResourceSlices (pkg/resourceslices) and the kubelet plugin's `slices` subcommand.

.PHONY: update-golden-slices
update-golden-slices: ## rewrite the golden output of `dra-kubelet-plugin slices` after an intended change
	$(GO) test -count=1 -run TestSlicesGolden ./cmd/dra-kubelet-plugin/ -update

.PHONY: bench-slices
bench-slices: ## benchmarks: building 300 devices, one allocator run on a DGX H100
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/resourceslices/... ./pkg/dra/...

# The mock NVML library and driver root for running the real-GPU code path
# without a GPU (docs/nvml.md).

.PHONY: mock-nvml
mock-nvml: ## build the mock libnvidia-ml.so.1 (profile: TANGRAM_MOCK_NVML_PROFILE, default dgx-h100); prints its path last
	@hack/mock-nvml/build.sh

.PHONY: nvidia-cdi-hook
nvidia-cdi-hook: ## build nvidia-cdi-hook from the NVIDIA container toolkit in go.mod (cached); prints its path last
	@hack/nvidia-cdi-hook/build.sh

# `make test-cold`: a cold `make test` anyone can reproduce (hack/cold-run.sh, docs/testing.md).

.PHONY: test-cold
test-cold: ## `make test` from a clone of HEAD with every cache empty, in a scratch dir (root; ~52 min); COLD_RUN_ARGS="--keep --dir DIR --dry-run"
	@hack/cold-run.sh $(COLD_RUN_ARGS)

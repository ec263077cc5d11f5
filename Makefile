# Tangram — top-level targets. Area-specific targets live in hack/make/*.mk.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO ?= go
# go-nvml's cgo prolog calls functions NVML marks deprecated; the warnings are noise.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# The build modes of hack/gomodes.sh (race, static, node): every go command
# builds with -trimpath, and each target names its mode, so a package is
# compiled once per mode for all of make test (docs/testing.md). No DWARF
# (-gcflags=all=-dwarf=false, -ldflags=-w) in what make compiles and links
# (tests, tools; the images strip it anyway): only a debugger reads it, and
# not generating it cuts a cold compile by about a tenth. Stack traces and
# race reports keep their file:line (they use the pcln table). A command's
# own -gcflags or -ldflags replaces these; to debug with dlv, use go build.
GO_MODE_FLAGS := -trimpath -gcflags=all=-dwarf=false -ldflags=-w
export GOFLAGS := $(strip $(filter-out $(GO_MODE_FLAGS),$(GOFLAGS)) $(GO_MODE_FLAGS))
# The Go compiler spends much of a cold build collecting garbage: GOGC=400
# (a heap up to five times the live one; two compiles at a time) cut a cold
# compile by about a fifth on the 2-core VM (docs/testing.md). Only for the
# go commands of the test stages, whose test binaries inherit it; benchmarks
# and `make build` run as they ship.
GO_BUILD_GOGC ?= 400
GOC = GOGC=$(GO_BUILD_GOGC) $(GO)
STATIC_ENV := CGO_ENABLED=0
GO_STATIC = $(STATIC_ENV) $(GOC)
BIN_DIR ?= $(CURDIR)/bin

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_.-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-28s %s\n", $$1, $$2}'

.PHONY: build
build: ## build every binary into ./bin
	@mkdir -p $(BIN_DIR)
	$(GO) build -o $(BIN_DIR)/ ./cmd/...

.PHONY: verify
verify: verify-static vet-cgo ## gofmt, go vet of every file (cgo's too), generated API deepcopy/CRD up to date

.PHONY: verify-static
verify-static: ## make test's first stage: gofmt, go vet in the static mode, generated API code up to date
	@echo "==> gofmt"; out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@# The static mode: vet type-checks against the compiles the static
	@# stages reuse (unit-nocgo, the images, the e2e tests); the files only
	@# cgo builds are vet-cgo's (hack/vet.sh).
	@hack/vet.sh static
	@echo "==> generated API code"; $(MAKE) --no-print-directory verify-generated-api

.PHONY: vet-cgo
vet-cgo: ## go vet, in the race mode make unit compiles, of the packages with files only cgo builds (go-nvml's users)
	@hack/vet.sh cgo

.PHONY: unit
unit: ## unit tests with the race detector
	@echo "==> unit tests (race detector on)"
	$(GOC) test -race -count=1 ./...

.PHONY: test
test: ## everything CI runs: verify, unit (race), chart, scheduler plugin, then the e2e suite on a local 1.37 cluster
	@hack/test-all.sh

-include hack/make/*.mk

# Former names of targets, kept because docs or notes outside this tree may
# still say them; `make help` lists only the names above.
.PHONY: helm-lint controller-generate controller-verify controller-test controller-realcluster \
	cluster-chart kubectl-tangram-golden kubectl-tangram-bench checkpoint-fuzz gpu-nocgo
helm-lint: test-chart
controller-generate: generate-api
controller-verify: verify-generated-api
controller-test: test-controller
controller-realcluster: test-controller-realcluster
cluster-chart: cluster-install-chart
kubectl-tangram-golden: update-golden-view
kubectl-tangram-bench: bench-view
checkpoint-fuzz: fuzz-checkpoint
gpu-nocgo: unit-nocgo-node

# dra-controller: GpuGang API (api/tangram), reconcilers, admission webhook,
# metrics (pkg/controller, cmd/dra-controller). See docs/controller.md.

CONTROLLER_GEN_VERSION ?= v0.23.0
# controller-gen lives in GOPATH/bin, never in the repository.
CONTROLLER_GEN ?= $(shell $(GO) env GOPATH)/bin/controller-gen
CONTROLLER_CRD_DIR := deployments/helm/tangram/crds
CONTROLLER_PKGS := ./api/tangram/... ./pkg/controller/... ./cmd/dra-controller/...

$(CONTROLLER_GEN):
	$(GO_STATIC) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

.PHONY: generate-api
generate-api: $(CONTROLLER_GEN) ## regenerate the API deepcopy (GpuGang, GpuConfig) and the CRD manifest in the chart's crds/
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd:crdVersions=v1 paths=./api/tangram/... output:crd:dir=$(CONTROLLER_CRD_DIR)

.PHONY: verify-generated-api
verify-generated-api: $(CONTROLLER_GEN) ## fail if the committed API deepcopy (GpuGang, GpuConfig) or CRD manifest is stale
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  cp api/tangram/v1alpha1/zz_generated.deepcopy.go $$tmp/tangram.before && \
	  cp api/gpu/v1alpha1/zz_generated.deepcopy.go $$tmp/gpu.before && \
	  $(CONTROLLER_GEN) crd:crdVersions=v1 paths=./api/tangram/... output:crd:dir=$$tmp/crds && \
	  $(CONTROLLER_GEN) object paths=./api/... && \
	  for api in tangram gpu; do \
	    if ! diff -u $$tmp/$$api.before api/$$api/v1alpha1/zz_generated.deepcopy.go; then \
	      cp $$tmp/$$api.before api/$$api/v1alpha1/zz_generated.deepcopy.go; \
	      echo "api/$$api/v1alpha1/zz_generated.deepcopy.go is stale: run make generate-api"; exit 1; fi; \
	  done && \
	  if ! diff -ru $$tmp/crds $(CONTROLLER_CRD_DIR); then echo "the CRD manifest is stale: run make generate-api"; exit 1; fi

.PHONY: test-controller
test-controller: ## unit tests of the GpuGang API, controller, webhook and metrics (race detector on)
	$(GO) test -race -count=1 $(CONTROLLER_PKGS)

.PHONY: test-controller-realcluster
test-controller-realcluster: ## the controller in-process against a real API server (TANGRAM_KUBECONFIG): CRD, gang objects, webhook, leader election
	@test -n "$(TANGRAM_KUBECONFIG)" || { echo "set TANGRAM_KUBECONFIG to a cluster this test may write to"; exit 1; }
	TANGRAM_KUBECONFIG=$(TANGRAM_KUBECONFIG) $(GO) test -tags realcluster -count=1 -v -run 'TestRealCluster' ./pkg/controller/app/

.PHONY: unit-nocgo
unit-nocgo: ## unit tests of the packages the static images link (controller, kubectl plugin, scheduler), with CGO_ENABLED=0
	@hack/unit-nocgo.sh

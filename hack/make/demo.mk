# Helm chart, images and the demo (docs/demo.md, docs/install.md).

# Where hack/local-cluster/build-binaries.sh puts helm; same cache as the cluster.
DEMO_HELM = $(shell bash -c 'source hack/local-cluster/lib.sh >/dev/null 2>&1 && echo $$HELM_BIN/helm')

.PHONY: test-chart
test-chart: ## the chart's tests: helm lint, helm template with several value sets and the values files of each cluster kind, schema rejections, rendered-object checks
	@hack/local-cluster/build-binaries.sh helm
	$(GO_STATIC) vet -tags helm ./deployments/helm/
	@echo "==> chart tests with $(DEMO_HELM)"
	HELM=$(DEMO_HELM) $(GO_STATIC) test -tags helm -count=1 ./deployments/helm/

.PHONY: images
images: ## build the chart's images (cgo kubelet plugin on glibc, static others) + test images as reproducible OCI archives; no Docker or registry
	@hack/images/build-images.sh
	@echo "archives: ctr -n k8s.io images import <archive>, kind load image-archive <archive>, or push them (docs/install.md#images)"

.PHONY: images-reproducible
images-reproducible: ## build every image twice (another directory and umask) and fail unless the digests match
	@hack/images/check-reproducible.sh

.PHONY: demo
demo: ## local 1.37 cluster + helm install with fake H100s + every demo scenario, summarised (root; see docs/demo.md)
	@demo/run-local.sh

.PHONY: kind-demo
kind-demo: ## the demo on kind: offline (root, node image built from source, private Docker engine) unless a Docker engine answers; see docs/demo.md
	@demo/kind-up.sh

.PHONY: test-kind
test-kind: ## the offline kind demo as a test: every scenario on a one-node kind cluster, then teardown (.ci/run: only when the node image is cached)
	@KIND_OFFLINE=1 demo/kind-up.sh

# test-demo holds the cluster lock once for the demo and its teardown, so no
# other run starts on the cluster in between.
.PHONY: test-demo
test-demo: ## make demo as a test: install through the Helm chart, check every scenario (e2e specs labelled demo), then tear the cluster down
	@hack/local-cluster/with-lock.sh bash -c 'rc=0; demo/run-local.sh || rc=$$?; hack/local-cluster/down.sh || true; exit $$rc'

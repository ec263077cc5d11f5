# Local Kubernetes cluster and the e2e suite (hack/local-cluster, test/e2e).
# See docs/local-cluster.md and docs/testing.md.

LOCAL_CLUSTER := hack/local-cluster

.PHONY: cluster-binaries
cluster-binaries: ## build or reuse the cached Kubernetes, etcd, containerd, crictl and helm binaries
	$(LOCAL_CLUSTER)/build-binaries.sh

.PHONY: cluster-up
cluster-up: ## start the one-node local cluster (etcd, control plane, containerd, kubelet)
	$(LOCAL_CLUSTER)/up.sh

.PHONY: cluster-down
cluster-down: ## stop the local cluster and remove its processes, mounts, network and state
	$(LOCAL_CLUSTER)/down.sh

.PHONY: cluster-install-chart
cluster-install-chart: ## install Tangram on the local cluster with the Helm chart, as the tests do (plugin, controller, tangram-scheduler)
	$(LOCAL_CLUSTER)/chart.sh install

.PHONY: e2e
e2e: ## run the e2e suite against a running cluster (KUBECONFIG, default the local cluster with the chart installed)
	$(GO_STATIC) vet -tags e2e ./test/e2e/
	$(LOCAL_CLUSTER)/e2e.sh $(E2E_ARGS)

.PHONY: test-soak
test-soak: ## cluster up, Helm chart, churn-and-crash soak (SOAK_SECONDS, default 300) with audit, cluster down
	$(LOCAL_CLUSTER)/soak.sh

.PHONY: test-e2e
test-e2e: ## cluster up, Helm chart, Prometheus, e2e suite, dashboard queries, cluster down, with stage durations
	$(LOCAL_CLUSTER)/test-e2e.sh

.PHONY: test-e2e-realpath
test-e2e-realpath: ## the real-GPU path without a GPU: cluster with the mock driver root, chart with the cgo plugin image and no fake profile, realpath e2e specs, cluster down
	$(LOCAL_CLUSTER)/test-e2e-realpath.sh

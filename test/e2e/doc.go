// Package e2e is Tangram's end-to-end suite: real pods on a real cluster
// asking for GPUs through ResourceClaims, checked from what the pods print
// and what the claims' status says. The tests carry the build tag "e2e":
//
//	go test -tags e2e ./test/e2e -args --kubeconfig=$KUBECONFIG
//
// See docs/testing.md.
package e2e

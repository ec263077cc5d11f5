package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestControllerDoesNotLinkTheView: the controller reads the cluster model
// (pkg/cluster); the kubectl view and its table renderer (pkg/clusterview)
// belong to kubectl-tangram alone.
func TestControllerDoesNotLinkTheView(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/tangram-gpu/tangram/pkg/clusterview") {
			t.Errorf("dra-controller links %s; compute from pkg/cluster instead", pkg)
		}
	}
}

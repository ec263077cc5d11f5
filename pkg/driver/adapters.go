package driver

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	configapi "github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/config"
)

// ResolveConfigs is the ConfigResolver backed by pkg/config.
func ResolveConfigs(claim *resourceapi.ResourceClaim, plan []plannedDevice) ([]*configapi.GpuConfig, error) {
	resolved, err := config.Resolve(claim.Status.Allocation.Devices.Config, config.RequestNames(claim))
	if err != nil {
		return nil, err
	}
	out := make([]*configapi.GpuConfig, len(plan))
	for i, p := range plan {
		out[i] = resolved.For(p.Request)
	}
	return out, nil
}

// APIClaimLister lists every ResourceClaim through the API server.
func APIClaimLister(client kubernetes.Interface) ClaimLister {
	return func(ctx context.Context) ([]resourceapi.ResourceClaim, error) {
		list, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		return list.Items, nil
	}
}

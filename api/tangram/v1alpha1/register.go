package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// GroupName is the API group of the controller's own resources.
	GroupName = "tangram.dev"
	// Version is the API version of this package.
	Version = "v1alpha1"
	// Kind of a gang.
	Kind = "GpuGang"
	// Resource is the plural resource name of GpuGang.
	Resource = "gpugangs"
)

var (
	// SchemeGroupVersion is tangram.dev/v1alpha1.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}
	// GroupVersionResource addresses GpuGangs with a dynamic client.
	GroupVersionResource = SchemeGroupVersion.WithResource(Resource)
	// GroupVersionKind of a GpuGang.
	GroupVersionKind = SchemeGroupVersion.WithKind(Kind)

	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds GpuGang and GpuGangList to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &GpuGang{}, &GpuGangList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

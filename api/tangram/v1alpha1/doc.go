// Package v1alpha1 is the tangram.dev/v1alpha1 API of the Tangram
// controller: GpuGang, an all-or-nothing group of pods that each get their
// own GPUs.
//
// A GpuGang is a short way to ask for what Kubernetes expresses with three
// native objects: a scheduling.k8s.io/v1beta1 Workload and PodGroup with a
// gang policy, and the resource.k8s.io/v1 ResourceClaimTemplate every member
// pod references. The controller creates and owns those objects and reports
// in status where the members landed or, while they wait, why they cannot be
// placed.
//
// +kubebuilder:object:generate=true
// +groupName=tangram.dev
package v1alpha1

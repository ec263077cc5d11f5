package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GpuGang is a group of pods that is scheduled all or nothing, each member
// pod with its own GPUs of the same shape.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=gang;gangs,categories=tangram
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.spec.members.count`
// +kubebuilder:printcolumn:name="Placed",type=integer,JSONPath=`.status.placed`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Diagnosis",type=string,JSONPath=`.status.diagnosis`,priority=1
type GpuGang struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GpuGangSpec   `json:"spec"`
	Status GpuGangStatus `json:"status,omitempty"`
}

// GpuGangSpec says how many member pods there are and what GPUs each gets.
// It cannot change after creation: the Workload, PodGroup and claim
// template derived from it are immutable in Kubernetes too.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: delete the GpuGang and create it again"
type GpuGangSpec struct {
	// Members is the size of the gang.
	Members GangMembers `json:"members"`
	// GPUs is what every member pod gets, through its own ResourceClaim
	// made from the gang's ResourceClaimTemplate.
	GPUs MemberGPUs `json:"gpus"`
	// TopologyKey, when set, is a node label all members must share (for
	// example an InfiniBand zone label). Nodes without the label are not
	// used. The PodGroup carries it as a topology constraint where the
	// cluster supports that (feature gate TopologyAwareWorkloadScheduling).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	TopologyKey string `json:"topologyKey,omitempty"`
	// PriorityClassName is the PriorityClass (scheduling.k8s.io/v1) of
	// the gang. The PodGroup carries it (spec.priorityClassName and
	// spec.priority), so the scheduler can preempt lower-priority pods for
	// the whole gang. Every member pod must set the same
	// spec.priorityClassName: the scheduler refuses a pod group whose
	// pods' priority differs from the group's. Unset leaves the PodGroup
	// without a class (priority 0, or the cluster's globalDefault class).
	// Like the rest of the spec it cannot change after creation (the
	// PodGroup's priority is immutable too).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// GangMembers is how many member pods the gang has and how many must be
// placed together before any of them starts.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minCount) || self.minCount <= self.count",message="minCount must not exceed count"
type GangMembers struct {
	// Count is the number of member pods.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Count int32 `json:"count"`
	// MinCount is how many members the scheduler must be able to place at
	// once (the gang policy's minCount). Defaults to count.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinCount *int32 `json:"minCount,omitempty"`
}

// MemberGPUs is one member's GPUs: whole cards or one share of a card.
//
// +kubebuilder:validation:XValidation:rule="has(self.whole) != has(self.share)",message="set exactly one of whole and share"
type MemberGPUs struct {
	// Whole asks for whole cards, exclusive to the member.
	//
	// +optional
	Whole *WholeGPUs `json:"whole,omitempty"`
	// Share asks for a memory (and optionally compute) share of one card,
	// from the shared-gpu.tangram.dev class.
	//
	// +optional
	Share *GPUShare `json:"share,omitempty"`
	// DeviceClassName overrides the class: gpu.tangram.dev for whole
	// cards, shared-gpu.tangram.dev for shares.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DeviceClassName string `json:"deviceClassName,omitempty"`
}

// WholeGPUs is a number of whole cards on one node.
type WholeGPUs struct {
	// Count is how many cards each member gets.
	//
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	Count int32 `json:"count"`
	// SameNVLinkDomain requires a member's cards to reach each other over
	// NVLink (equal nvlinkDomain attribute).
	//
	// +optional
	SameNVLinkDomain bool `json:"sameNVLinkDomain,omitempty"`
}

// GPUShare is a share of one card, enforced by the card's isolation
// backend (MPS by default).
type GPUShare struct {
	// Memory is the card memory of the share, e.g. 20Gi; it is rounded up
	// to the card's step.
	Memory resource.Quantity `json:"memory"`
	// Compute is the percentage of the card's streaming multiprocessors;
	// unset means time-shared without a limit.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Compute *int32 `json:"compute,omitempty"`
}

// GangPhase is where the gang is in its life.
//
// +kubebuilder:validation:Enum=Pending;Scheduled;Running;Failed
type GangPhase string

const (
	// GangPending: fewer than minCount members are bound to nodes.
	GangPending GangPhase = "Pending"
	// GangScheduled: at least minCount members are bound to nodes, not all
	// of those are running yet.
	GangScheduled GangPhase = "Scheduled"
	// GangRunning: at least minCount members are running.
	GangRunning GangPhase = "Running"
	// GangFailed: a member pod failed, or the controller cannot create the
	// gang's objects (see the Ready condition).
	GangFailed GangPhase = "Failed"
)

// Condition types in status.conditions.
const (
	// ConditionObjectsReady says whether the Workload, PodGroup and
	// ResourceClaimTemplate exist and belong to the gang.
	ConditionObjectsReady = "ObjectsReady"
	// ConditionTopologyEnforced says whether the PodGroup carries the
	// topology constraint, or the cluster does not support it.
	ConditionTopologyEnforced = "TopologyEnforced"
	// ConditionMemberPriority says whether every member pod has the
	// PodGroup's priority; the scheduler refuses the group otherwise.
	ConditionMemberPriority = "MemberPriorityMatches"
)

// GpuGangStatus is what the controller observed.
type GpuGangStatus struct {
	// ObservedGeneration is the generation the status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the members.
	//
	// +optional
	Phase GangPhase `json:"phase,omitempty"`
	// PodGroupName is what member pods set as
	// spec.schedulingGroup.podGroupName.
	//
	// +optional
	PodGroupName string `json:"podGroupName,omitempty"`
	// ResourceClaimTemplateName is what member pods reference in
	// spec.resourceClaims[].resourceClaimTemplateName.
	//
	// +optional
	ResourceClaimTemplateName string `json:"resourceClaimTemplateName,omitempty"`
	// Placed counts member pods bound to a node; Running those running.
	//
	// +optional
	Placed int32 `json:"placed"`
	// +optional
	Running int32 `json:"running"`
	// Members are the member pods found, by name.
	//
	// +optional
	// +listType=map
	// +listMapKey=pod
	Members []MemberStatus `json:"members,omitempty"`
	// Diagnosis says in plain words, while the gang is pending, whether
	// the cluster has room for it and what is missing.
	//
	// +optional
	Diagnosis string `json:"diagnosis,omitempty"`
	// Conditions are ObjectsReady, TopologyEnforced and
	// MemberPriorityMatches.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MemberStatus is one member pod.
type MemberStatus struct {
	// Pod is the member pod's name.
	Pod string `json:"pod"`
	// Node is where it is bound, empty while pending.
	//
	// +optional
	Node string `json:"node,omitempty"`
	// PodPhase is the pod's phase.
	//
	// +optional
	PodPhase string `json:"podPhase,omitempty"`
	// Claim is the member's ResourceClaim, once created.
	//
	// +optional
	Claim string `json:"claim,omitempty"`
	// Devices are the allocated devices, "<pool>/<device>" (for a share
	// with its memory and compute), once allocated.
	//
	// +optional
	Devices []string `json:"devices,omitempty"`
}

// GpuGangList is a list of GpuGangs.
//
// +kubebuilder:object:root=true
type GpuGangList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GpuGang `json:"items"`
}

// MinMembers is minCount, defaulting to count.
func (s *GpuGangSpec) MinMembers() int32 {
	if s.Members.MinCount != nil {
		return *s.Members.MinCount
	}
	return s.Members.Count
}

// Package gang reconciles GpuGangs: it creates the Workload, PodGroup and
// ResourceClaimTemplate a gang stands for, and reports in the gang's status
// where its member pods landed or why they cannot be placed.
package gang

import (
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tangramv1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/device"
)

const (
	// PodGroupTemplateName is the Workload's only pod group template.
	PodGroupTemplateName = "members"
	// RequestName is the device request in the member claim; pods can
	// refer to it in containers' resources.claims[].request.
	RequestName = "gpus"
	// templateSuffix makes the ResourceClaimTemplate name "<gang>-gpus".
	templateSuffix = "-gpus"
	// LabelGang marks every object the controller creates with the gang's
	// name, so they can be listed with a selector.
	LabelGang = tangramv1.GroupName + "/gpugang"
)

// WorkloadName, PodGroupName and TemplateName are the names of the objects
// a gang owns. The PodGroup has the gang's own name so that the name a
// member pod sets is the name the user chose.
func WorkloadName(g *tangramv1.GpuGang) string { return g.Name }

// PodGroupName is what member pods set in spec.schedulingGroup.podGroupName.
func PodGroupName(g *tangramv1.GpuGang) string { return g.Name }

// TemplateName is what member pods set in resourceClaimTemplateName.
func TemplateName(g *tangramv1.GpuGang) string { return g.Name + templateSuffix }

// ownedMeta is the metadata of an object owned by the gang: deleting the
// gang deletes it (garbage collector), and it names the gang in a label.
func ownedMeta(g *tangramv1.GpuGang, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: g.Namespace,
		Labels:    map[string]string{LabelGang: g.Name},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         tangramv1.SchemeGroupVersion.String(),
			Kind:               tangramv1.Kind,
			Name:               g.Name,
			UID:                g.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}},
	}
}

// gangPolicy is the scheduling policy of the members: all or nothing for
// minCount pods.
func gangPolicy(g *tangramv1.GpuGang) schedulingapi.PodGroupSchedulingPolicy {
	return schedulingapi.PodGroupSchedulingPolicy{Gang: &schedulingapi.GangSchedulingPolicy{MinCount: g.Spec.MinMembers()}}
}

// disruptedTogether is the members' disruptionMode: All. A GpuGang's
// members are one job (its pods run all or nothing), so a preemption
// evicts all of them or none: kube-scheduler 1.37's own preemption and
// tangram-scheduler's read this field and treat the group as one victim
// (pkg/preemption.Gang). The API's default, Single, would let a
// preemption evict one member alone and leave its peers holding their
// cards.
func disruptedTogether() *schedulingapi.DisruptionMode {
	return &schedulingapi.DisruptionMode{All: &schedulingapi.AllDisruptionMode{}}
}

// topologyConstraints keeps the members in one domain of the gang's
// topology key; nil without a key or when the cluster lacks support.
func topologyConstraints(g *tangramv1.GpuGang, withTopology bool) *schedulingapi.PodGroupSchedulingConstraints {
	if g.Spec.TopologyKey == "" || !withTopology {
		return nil
	}
	return &schedulingapi.PodGroupSchedulingConstraints{
		Topology: []schedulingapi.TopologyConstraint{{Key: g.Spec.TopologyKey}},
	}
}

// Priority is the gang's resolved PriorityClass: its name and value. The
// zero Priority (no name) leaves the scheduling objects without one.
type Priority struct {
	ClassName string
	Value     int32
}

// value is the priority value for the objects' spec.priority, nil without
// a class.
func (p Priority) value() *int32 {
	if p.ClassName == "" {
		return nil
	}
	return ptr.To(p.Value)
}

// DesiredWorkload is the gang's Workload: one pod group template with the
// gang policy, disruptionMode All and priority, controlled by the GpuGang.
func DesiredWorkload(g *tangramv1.GpuGang, withTopology bool, prio Priority) *schedulingapi.Workload {
	return &schedulingapi.Workload{
		ObjectMeta: ownedMeta(g, WorkloadName(g)),
		Spec: schedulingapi.WorkloadSpec{
			ControllerRef: &schedulingapi.TypedLocalObjectReference{
				APIGroup: tangramv1.GroupName, Kind: tangramv1.Kind, Name: g.Name,
			},
			PodGroupTemplates: []schedulingapi.PodGroupTemplate{{
				Name:                  PodGroupTemplateName,
				SchedulingPolicy:      gangPolicy(g),
				SchedulingConstraints: topologyConstraints(g, withTopology),
				DisruptionMode:        disruptedTogether(),
				PriorityClassName:     prio.ClassName,
				Priority:              prio.value(),
			}},
		},
	}
}

// DesiredPodGroup is the runtime instance of the Workload's template that
// member pods join, disrupted only as a whole (disruptionMode All). With a
// PriorityClass it carries both the class name
// and its value: the Priority admission plugin accepts a value equal to
// the class's, and the scheduler reads spec.priority (nil means 0) when it
// preempts for the group and checks that every member has that priority.
// preemptionPolicy is left to the admission plugin (it fills it from the
// class where the PodGroupPreemptionPolicy feature gate is on; with the
// gate off the field is forbidden).
func DesiredPodGroup(g *tangramv1.GpuGang, withTopology bool, prio Priority) *schedulingapi.PodGroup {
	return &schedulingapi.PodGroup{
		ObjectMeta: ownedMeta(g, PodGroupName(g)),
		Spec: schedulingapi.PodGroupSpec{
			WorkloadRef: &schedulingapi.WorkloadReference{
				WorkloadName: WorkloadName(g), TemplateName: PodGroupTemplateName,
			},
			SchedulingPolicy:      gangPolicy(g),
			SchedulingConstraints: topologyConstraints(g, withTopology),
			DisruptionMode:        disruptedTogether(),
			PriorityClassName:     prio.ClassName,
			Priority:              prio.value(),
		},
	}
}

// DesiredTemplate is the ResourceClaimTemplate each member pod references:
// the resourceclaim controller makes one claim per pod from it.
func DesiredTemplate(g *tangramv1.GpuGang) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: ownedMeta(g, TemplateName(g)),
		Spec: resourceapi.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelGang: g.Name}},
			Spec:       MemberClaimSpec(g),
		},
	}
}

// MemberClaimSpec is the claim every member gets.
func MemberClaimSpec(g *tangramv1.GpuGang) resourceapi.ResourceClaimSpec {
	gpus := g.Spec.GPUs
	req := resourceapi.ExactDeviceRequest{
		DeviceClassName: gpus.DeviceClassName,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
		Count:           1,
	}
	var constraints []resourceapi.DeviceConstraint
	switch {
	case gpus.Share != nil:
		if req.DeviceClassName == "" {
			req.DeviceClassName = device.SharedDeviceClassName
		}
		requests := map[resourceapi.QualifiedName]resource.Quantity{
			device.CapacityMemory: gpus.Share.Memory.DeepCopy(),
		}
		if gpus.Share.Compute != nil {
			requests[device.CapacityCompute] = *resource.NewQuantity(int64(*gpus.Share.Compute), resource.DecimalSI)
		}
		req.Capacity = &resourceapi.CapacityRequirements{Requests: requests}
	case gpus.Whole != nil:
		if req.DeviceClassName == "" {
			req.DeviceClassName = device.DeviceClassName
		}
		req.Count = max(int64(gpus.Whole.Count), 1)
		if gpus.Whole.SameNVLinkDomain && req.Count > 1 {
			constraints = []resourceapi.DeviceConstraint{{
				Requests:       []string{RequestName},
				MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(device.DriverName + "/" + device.AttrNVLinkDomain)),
			}}
		}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests:    []resourceapi.DeviceRequest{{Name: RequestName, Exactly: &req}},
		Constraints: constraints,
	}}
}

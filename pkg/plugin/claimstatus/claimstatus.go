// Package claimstatus is what the kubelet plugin writes into a prepared
// claim's status.devices: each device's data (DeviceData) and its
// LimitsEnforced condition, how a share's limits are held on this node,
// and the Warning event's message for a share a tenant can exceed. All of
// it is pure but the API writer.
package claimstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/enforcement"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// Enforcement says how a prepared device's bounds are held, in the device
// data of ResourceClaim.status.devices.
type Enforcement string

const (
	// EnforcementExclusive: a whole card, nobody else on it.
	EnforcementExclusive Enforcement = "exclusive"
	// EnforcementMPS: a share whose limits are MPS client settings
	// (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)
	// served by the node's MPS daemon. The workload could unset them.
	EnforcementMPS Enforcement = "mps"
	// EnforcementSimulated: an MPS share on fake GPUs; nothing runs.
	EnforcementSimulated Enforcement = "simulated"
	// EnforcementNone: a share that is accounted by the scheduler only.
	EnforcementNone Enforcement = "none"
	// EnforcementAdminAccess: monitoring; the card is seen as it is.
	EnforcementAdminAccess Enforcement = "admin-access"
	// EnforcementMIG: a MIG partition, held by the GPU in hardware (its
	// own memory, cache and SMs).
	EnforcementMIG Enforcement = "mig"
)

// Condition types of our entries in status.devices.
const (
	// ConditionReady is the condition DRA defines: the device is prepared.
	ConditionReady = "Ready"
	// ConditionLimitsEnforced is True when the device cannot exceed what
	// it was given (a whole card, admin access, a share on a node whose
	// shareEnforcement is "hard"), False when a tenant can: a share on a
	// "compute-only" or "advisory" node (its reason and the node's
	// shareEnforcementReason say why), or one accounted only.
	ConditionLimitsEnforced = "LimitsEnforced"
)

// Reasons of a share's LimitsEnforced condition on a node that published
// its enforcement level.
const (
	// ReasonHard: memory is a limit on the pod's cgroup the driver
	// enforces and compute the claim's MPS v3 namespace.
	ReasonHard = "HardLimits"
	// ReasonComputeOnly: compute is held by the claim's MPS v3
	// namespace, memory is not limited per pod.
	ReasonComputeOnly = "ComputeOnly"
	// ReasonAdvisory: the limits are MPS client settings in the
	// container's environment (classic MPS, drivers before r615), or
	// nothing at all on fake GPUs.
	ReasonAdvisory = "Advisory"
	// ReasonAccountingOnly: sharing backend none.
	ReasonAccountingOnly = "AccountingOnly"
)

// ReasonShareNotEnforced is the reason of the Warning event on the pods
// of a claim whose share a tenant can exceed.
const ReasonShareNotEnforced = "GPUShareNotEnforced"

// DeviceData is the driver data of one prepared device in
// ResourceClaim.status.devices[].data.
type DeviceData struct {
	UUID        string `json:"uuid"`
	PCIBusID    string `json:"pciBusID,omitempty"`
	ProductName string `json:"productName,omitempty"`
	// Memory is the share's memory (the card's for a whole card) as a
	// quantity, MemoryBytes the same in bytes.
	Memory      string `json:"memory"`
	MemoryBytes int64  `json:"memoryBytes"`
	// ComputePercent is the share's compute; 100 for a whole card, 0 for a
	// share that asked for none (time-sliced with the card's other shares).
	ComputePercent int64       `json:"computePercent"`
	Share          bool        `json:"share"`
	Enforcement    Enforcement `json:"enforcement"`
	// ShareEnforcement is, on a share, the node's shareEnforcement level
	// ("hard", "compute-only", "advisory"), and ShareEnforcementReason,
	// below hard, its reason code (device.ShareEnforcementReasonText).
	ShareEnforcement       string `json:"shareEnforcement,omitempty"`
	ShareEnforcementReason string `json:"shareEnforcementReason,omitempty"`
	// MIG is set on a MIG partition, whose UUID above is the MIG
	// device's ("MIG-<uuid>", what CUDA_VISIBLE_DEVICES and nvidia-smi
	// name) and whose memory is its profile's.
	MIG *MIGData `json:"mig,omitempty"`
}

// MIGData is what status.devices says of a MIG partition.
type MIGData struct {
	// Profile is the profile's name ("3g.40gb"), ProfileID NVML's ID.
	Profile   string `json:"profile"`
	ProfileID int    `json:"profileID"`
	// PlacementStart and PlacementSize are its memory slices.
	PlacementStart int `json:"placementStart"`
	PlacementSize  int `json:"placementSize"`
	// GPUInstanceID and ComputeInstanceID are NVML's (nvidia-smi mig -lgi
	// and -lci list them).
	GPUInstanceID     int `json:"gpuInstanceID"`
	ComputeInstanceID int `json:"computeInstanceID"`
	// ParentUUID is the card's UUID.
	ParentUUID string `json:"parentUUID"`
}

// migData is the status data of a created MIG partition. Pure.
func migData(dev prepared.Device) *MIGData {
	m := dev.MIG
	if m == nil {
		return nil
	}
	out := &MIGData{Profile: m.Profile, ProfileID: m.ProfileID, PlacementStart: m.Start, PlacementSize: m.Size, ParentUUID: dev.GPUUUID}
	if m.GPUInstanceID != nil {
		out.GPUInstanceID = *m.GPUInstanceID
	}
	if m.ComputeInstanceID != nil {
		out.ComputeInstanceID = *m.ComputeInstanceID
	}
	return out
}

// Node is what the node published about its shares: Simulated (fake
// GPUs), V3 (MPS v3 namespaces), its shareEnforcement Level and Reason
// code (empty level: not detected).
type Node struct {
	Simulated, V3 bool
	Level, Reason string
}

// Writer replaces our driver's entries in a claim's status.devices.
// Entries of other drivers are left alone.
type Writer interface {
	SetDevices(ctx context.Context, namespace, name string, devices []resourceapi.AllocatedDeviceStatus) error
}

// DeviceStatuses derives the status.devices entries of a prepared claim.
// Pure: pool is the node's, cards by device name, node what the node
// published about its shares, now stamps the conditions.
func DeviceStatuses(rec prepared.Claim, pool string, cards map[string]gpu.GPU, node Node, now metav1.Time) ([]resourceapi.AllocatedDeviceStatus, error) {
	out := make([]resourceapi.AllocatedDeviceStatus, 0, len(rec.Devices))
	for _, dev := range rec.Devices {
		card := cards[dev.Device]
		if dev.MIG != nil {
			card = cards[device.CardDeviceName(dev.MIG.ParentIndex)]
		}
		data := DeviceData{
			UUID:           dev.GPUUUID,
			PCIBusID:       card.PCIBusID,
			ProductName:    card.ProductName,
			Memory:         resource.NewQuantity(dev.MemoryBytes, resource.BinarySI).String(),
			MemoryBytes:    dev.MemoryBytes,
			ComputePercent: dev.ComputePercent,
			Share:          dev.Share,
		}
		enforced := metav1.Condition{Type: ConditionLimitsEnforced, LastTransitionTime: now}
		data.Enforcement, enforced.Status, enforced.Reason, enforced.Message = LimitsEnforced(dev, node)
		switch kind := dev.Kind(); {
		case kind == prepared.KindAdminAccess:
			data.MemoryBytes, data.Memory, data.ComputePercent = card.MemoryBytes, resource.NewQuantity(card.MemoryBytes, resource.BinarySI).String(), 100
		case kind == prepared.KindMIGPartition:
			// All of the partition's compute is its holder's.
			data.ComputePercent, data.UUID, data.MIG = 100, dev.MIG.UUID, migData(dev)
		case kind == prepared.KindWholeCard:
			data.ComputePercent = 100
		case kind == prepared.KindShare || node.Level != "":
			data.ShareEnforcement, data.ShareEnforcementReason = node.Level, node.Reason
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("encoding the status data of %s: %w", dev.Device, err)
		}
		st := resourceapi.AllocatedDeviceStatus{
			Driver: device.DriverName,
			Pool:   pool,
			Device: dev.Device,
			Conditions: []metav1.Condition{
				{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Prepared", Message: "CDI spec written", LastTransitionTime: now},
				enforced,
			},
			Data: &runtime.RawExtension{Raw: raw},
		}
		if dev.ShareID != "" {
			st.ShareID = &dev.ShareID
		}
		out = append(out, st)
	}
	return out, nil
}

// LimitsEnforced is how a prepared device is held to what it was given:
// its data's enforcement and its LimitsEnforced condition (status,
// reason, message). Pure: the status data and the Warning event on the
// pods of an unenforced share both say it.
func LimitsEnforced(dev prepared.Device, node Node) (Enforcement, metav1.ConditionStatus, string, string) {
	switch dev.Kind() {
	case prepared.KindAdminAccess:
		return EnforcementAdminAccess, metav1.ConditionTrue, "AdminAccess", "monitoring access: the card is seen as it is and nothing is held"
	case prepared.KindMIGPartition:
		return EnforcementMIG, metav1.ConditionTrue, "MIGPartition", "a MIG instance: its memory, cache and multiprocessors are the GPU's hardware partition, held by the GPU"
	case prepared.KindWholeCard:
		return EnforcementExclusive, metav1.ConditionTrue, "WholeCard", "the card belongs to this claim alone"
	case prepared.KindShare:
		return EnforcementNone, metav1.ConditionFalse, ReasonAccountingOnly, "sharing backend none: the scheduler accounts the share, nothing enforces it"
	}
	// An MPS share.
	switch {
	case node.Level != "":
		how := EnforcementMPS
		if node.Simulated {
			how = EnforcementSimulated
		}
		status, reason, message := shareCondition(node)
		return how, status, reason, message
	case node.Simulated:
		return EnforcementSimulated, metav1.ConditionFalse, "SimulatedMPS", "fake GPUs: the share is accounted and its MPS settings written, but no MPS daemon runs"
	case node.V3:
		return EnforcementMPS, metav1.ConditionTrue, "MPSNamespace", "the compute limit is the active-thread percentage of the claim's MPS v3 namespace, held by the node's MPS daemon; the namespace's pinned-memory limit backs the memory limit"
	default:
		return EnforcementMPS, metav1.ConditionTrue, "MPSClientLimits", "memory and compute limits are MPS client settings in the container's environment, served by the node's MPS daemon"
	}
}

// shareCondition is the LimitsEnforced condition of an MPS share on a
// node that published its level. Below hard, the message says what a
// tenant can do, why (the node's reason), and which class avoids it.
func shareCondition(node Node) (metav1.ConditionStatus, string, string) {
	why := ""
	if node.Reason != "" {
		why = " (" + device.ShareEnforcementReasonText(node.Reason) + ")"
	}
	avoid := fmt.Sprintf("; DeviceClass %s takes only nodes that enforce shares hard", device.HardSharedDeviceClassName)
	switch node.Level {
	case device.ShareEnforcementHard:
		return metav1.ConditionTrue, ReasonHard, "hard: the share's memory is a limit on its pod's cgroup the NVIDIA driver enforces, its compute the active-thread percentage of the claim's MPS v3 namespace, held by the node's MPS daemon"
	case string(enforcement.ComputeOnly):
		return metav1.ConditionFalse, ReasonComputeOnly, "compute-only: the compute limit is held by the claim's MPS v3 namespace, but memory is not limited per pod, so a tenant can use more memory than its share" + why + avoid
	case string(enforcement.Advisory):
		if node.Simulated {
			return metav1.ConditionFalse, ReasonAdvisory, "advisory: fake GPUs, the share is accounted and its MPS settings written, but nothing runs or is enforced" + why + avoid
		}
		return metav1.ConditionFalse, ReasonAdvisory, "advisory: the share's limits are classic MPS client settings in the container's environment, which the workload can unset to use more than its share" + why + avoid
	default:
		return metav1.ConditionFalse, ReasonAdvisory, "shareEnforcement " + node.Level + ": not hard" + why + avoid
	}
}

// UnenforcedMessage is the Warning event's message for the claim's shares that a
// tenant can exceed; "" when every device is held to what it was given.
// Pure.
func UnenforcedMessage(rec prepared.Claim, node Node, nodeName string) string {
	var devices []string
	message := ""
	for _, dev := range rec.Devices {
		if dev.Kind() == prepared.KindMPSShare && node.Level == "" {
			// The node published no level (tests): no event.
			continue
		}
		_, status, _, m := LimitsEnforced(dev, node)
		if status == metav1.ConditionTrue {
			continue
		}
		devices = append(devices, dev.Device)
		message = m
	}
	if len(devices) == 0 {
		return ""
	}
	return fmt.Sprintf("claim %s/%s: the share of %s on node %s is not enforced: %s", rec.Namespace, rec.Name, strings.Join(devices, ", "), nodeName, message)
}

// API writes status.devices through the API server with
// server-side apply, as field manager gpu.tangram.dev: our entries are
// ours alone, and applying an empty list removes them. It needs "patch" on
// resourceclaims/status and, with DRAResourceClaimGranularStatusAuthorization
// (beta, on in 1.37), "associated-node:patch" on resourceclaims/driver for
// the name gpu.tangram.dev.
type API struct {
	Client kubernetes.Interface
}

var _ Writer = API{}

// SetDevices applies the entries; a claim that no longer exists is fine.
func (a API) SetDevices(ctx context.Context, namespace, name string, devices []resourceapi.AllocatedDeviceStatus) error {
	status := resourceac.ResourceClaimStatus()
	for _, dev := range devices {
		ac := resourceac.AllocatedDeviceStatus().WithDriver(dev.Driver).WithPool(dev.Pool).WithDevice(dev.Device)
		if dev.ShareID != nil {
			ac.WithShareID(*dev.ShareID)
		}
		for _, c := range dev.Conditions {
			ac.WithConditions(metav1ac.Condition().WithType(c.Type).WithStatus(c.Status).WithReason(c.Reason).
				WithMessage(c.Message).WithLastTransitionTime(c.LastTransitionTime))
		}
		if dev.Data != nil {
			ac.WithData(*dev.Data)
		}
		status.WithDevices(ac)
	}
	claim := resourceac.ResourceClaim(name, namespace).WithStatus(status)
	_, err := a.Client.ResourceV1().ResourceClaims(namespace).ApplyStatus(ctx, claim,
		metav1.ApplyOptions{FieldManager: device.DriverName, Force: true})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing status.devices of claim %s/%s: %w", namespace, name, err)
	}
	return nil
}

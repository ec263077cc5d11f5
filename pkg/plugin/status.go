package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
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
)

// Condition types of our entries in status.devices.
const (
	// ConditionReady is the condition DRA defines: the device is prepared.
	ConditionReady = "Ready"
	// ConditionLimitsEnforced is True when the device cannot exceed what
	// it was given (a whole card, admin access) or the limits are enforced
	// by the MPS daemon, False when they are accounting only.
	ConditionLimitsEnforced = "LimitsEnforced"
)

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
}

// ClaimStatusWriter replaces our driver's entries in a claim's
// status.devices. Entries of other drivers are left alone.
type ClaimStatusWriter interface {
	SetDevices(ctx context.Context, namespace, name string, devices []resourceapi.AllocatedDeviceStatus) error
}

// deviceStatuses derives the status.devices entries of a prepared claim.
// Pure: pool is the node's, cards by device name, simulated reports fake GPUs, v3 MPS v3
// namespaces, now stamps the conditions.
func deviceStatuses(rec prepared.Claim, pool string, cards map[string]gpu.GPU, simulated, v3 bool, now metav1.Time) ([]resourceapi.AllocatedDeviceStatus, error) {
	out := make([]resourceapi.AllocatedDeviceStatus, 0, len(rec.Devices))
	for _, dev := range rec.Devices {
		card := cards[dev.Device]
		data := DeviceData{
			UUID:           dev.GPUUUID,
			PCIBusID:       card.PCIBusID,
			ProductName:    card.ProductName,
			Memory:         resource.NewQuantity(dev.MemoryBytes, resource.BinarySI).String(),
			MemoryBytes:    dev.MemoryBytes,
			ComputePercent: dev.ComputePercent,
			Share:          dev.Share,
		}
		enforced := metav1.Condition{Type: ConditionLimitsEnforced, Status: metav1.ConditionTrue, LastTransitionTime: now}
		switch {
		case dev.AdminAccess:
			data.Enforcement = EnforcementAdminAccess
			data.MemoryBytes, data.Memory, data.ComputePercent = card.MemoryBytes, resource.NewQuantity(card.MemoryBytes, resource.BinarySI).String(), 100
			enforced.Reason, enforced.Message = "AdminAccess", "monitoring access: the card is seen as it is and nothing is held"
		case !dev.Share:
			data.Enforcement = EnforcementExclusive
			data.ComputePercent = 100
			enforced.Reason, enforced.Message = "WholeCard", "the card belongs to this claim alone"
		case dev.UsesMPS() && simulated:
			data.Enforcement = EnforcementSimulated
			enforced.Status, enforced.Reason = metav1.ConditionFalse, "SimulatedMPS"
			enforced.Message = "fake GPUs: the share is accounted and its MPS settings written, but no MPS daemon runs"
		case dev.UsesMPS() && v3:
			data.Enforcement = EnforcementMPS
			enforced.Reason = "MPSNamespace"
			enforced.Message = "the compute limit is the active-thread percentage of the claim's MPS v3 namespace, held by the node's MPS daemon; the namespace's pinned-memory limit backs the memory limit"
		case dev.UsesMPS():
			data.Enforcement = EnforcementMPS
			enforced.Reason = "MPSClientLimits"
			enforced.Message = "memory and compute limits are MPS client settings in the container's environment, served by the node's MPS daemon"
		default:
			data.Enforcement = EnforcementNone
			enforced.Status, enforced.Reason = metav1.ConditionFalse, "AccountingOnly"
			enforced.Message = "sharing backend none: the scheduler accounts the share, nothing enforces it"
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

// writeStatus publishes the claim's device data. It is best effort: the
// containers can start without it, so a failure is logged, not returned.
func (d *Driver) writeStatus(ctx context.Context, rec prepared.Claim) {
	if d.cfg.ClaimStatus == nil {
		return
	}
	statuses, err := deviceStatuses(rec, d.cfg.NodeName, d.cards, d.cfg.SimulatedMPS, d.cfg.MPSv3, metav1.Now())
	if err == nil {
		err = d.cfg.ClaimStatus.SetDevices(ctx, rec.Namespace, rec.Name, statuses)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Writing the claim's device status failed; the claim is prepared all the same")
	}
}

// clearStatus removes our entries after unprepare, best effort: a claim
// that is gone or deallocated has none to remove.
func (d *Driver) clearStatus(ctx context.Context, rec prepared.Claim) {
	if d.cfg.ClaimStatus == nil || rec.Name == "" {
		return
	}
	if err := d.cfg.ClaimStatus.SetDevices(ctx, rec.Namespace, rec.Name, nil); err != nil {
		klog.FromContext(ctx).V(2).Info("Clearing the claim's device status failed", "err", err)
	}
}

// APIClaimStatus writes status.devices through the API server with
// server-side apply, as field manager gpu.tangram.dev: our entries are
// ours alone, and applying an empty list removes them. It needs "patch" on
// resourceclaims/status and, with DRAResourceClaimGranularStatusAuthorization
// (beta, on in 1.37), "associated-node:patch" on resourceclaims/driver for
// the name gpu.tangram.dev.
type APIClaimStatus struct {
	Client kubernetes.Interface
}

var _ ClaimStatusWriter = APIClaimStatus{}

// SetDevices applies the entries; a claim that no longer exists is fine.
func (a APIClaimStatus) SetDevices(ctx context.Context, namespace, name string, devices []resourceapi.AllocatedDeviceStatus) error {
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

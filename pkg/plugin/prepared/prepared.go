// Package prepared holds the one record of a prepared claim and its
// devices. The pure prepare plan produces it (PrepareStarted), the CDI step
// completes it with the CDI device IDs (PrepareCompleted), pkg/plugin/checkpoint
// persists it as is, the CDI package computes the claim's edits from it and
// KubeletDevices turns it into what the kubelet gets.
//
// The JSON of Claim and Device is the checkpoint's file format ("v1"): the
// old and the new plugin pod of a rolling update read and write the same
// file, and a downgraded plugin reads what a newer one wrote. Field names,
// their order and omitempty must not change; add fields only with
// omitempty, so that older plugins ignore them.
//
// Everything a record holds is in the file, except:
//   - Claim.UID, the file's map key, which the checkpoint sets on load;
//   - the pool, which is always the node's (the plan refuses results of
//     other pools), so the node name is given where the pool is needed.
package prepared

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
)

// State is how far a claim's preparation got.
type State string

const (
	// PrepareStarted is recorded before any side effect of prepare: the
	// claim's cards are reserved, its spec and MPS accounting may be
	// partly done. Never returned to the kubelet; rolled back after a
	// restart.
	PrepareStarted State = "PrepareStarted"
	// PrepareCompleted is recorded once the claim's CDI spec is written
	// and its MPS accounting done; its CDI device IDs were returned.
	PrepareCompleted State = "PrepareCompleted"
)

// Claim is one prepared (or being prepared) claim.
type Claim struct {
	// UID is the claim's UID, the key of the checkpoint's claims map (not
	// stored again inside the entry).
	UID       string `json:"-"`
	State     State  `json:"state"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Allocation is a digest of the allocation the claim was prepared
	// for: a claim allocated again differently keeps its UID. Empty in
	// records of older plugins.
	Allocation string   `json:"allocation,omitempty"`
	Devices    []Device `json:"devices,omitempty"`
	// NonRootClass is the strict device class (--nonroot-device-classes)
	// whose rule the claim's containers are held to: its CDI spec has
	// every container that joins the claim checked by the create hook
	// (tangram-cdi-hook --non-root-class), since the pods checked at
	// prepare are only those reserving it then. "" for other claims, and
	// in records of older plugins.
	NonRootClass string `json:"nonRootClass,omitempty"`
}

// Device is one allocation result of our driver in the claim, as prepared.
type Device struct {
	// Request is the result's request name ("req" or "req/sub").
	Request string `json:"request"`
	// Device is the ResourceSlice device name, "gpu-<index>" (a MIG
	// partition: "gpu-<index>-mig-<profileID>-<start>").
	Device  string `json:"device"`
	GPUUUID string `json:"gpuUUID,omitempty"`
	// ShareID is the allocator's share ID on a card that allows multiple
	// allocations, "" otherwise.
	ShareID string `json:"shareID,omitempty"`
	// Share is true when the result holds part of the card, so it is
	// isolated; the plan decides it once (device.HoldsWholeCard). A result
	// that consumed the card's whole allocatable memory, and admin access,
	// is not a share.
	Share bool `json:"share,omitempty"`
	// CDIDeviceIDs are the fully qualified CDI IDs given to the kubelet;
	// set when the preparation completed.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
	// MemoryBytes is the consumed memory of a share, the card's memory for
	// a whole card.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// ComputePercent is the consumed compute of a share, 0 when none.
	ComputePercent int64 `json:"computePercent,omitempty"`
	// AdminAccess marks a result that monitors the card without holding
	// any of it.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// MPSPipeDir is the node's MPS pipe directory, set only on shares
	// enforced by MPS: it is how the record says the share uses MPS (see
	// UsesMPS).
	MPSPipeDir string `json:"mpsPipeDir,omitempty"`
	// Config is the effective config the result was prepared with.
	Config *v1alpha1.GpuConfig `json:"config,omitempty"`
	// MIG is set on a MIG partition (device gpu-<i>-mig-<profileID>-<start>):
	// the instance to create, recorded (with the claim PrepareStarted)
	// before it is created, then what was created. GPUUUID is the parent
	// card's. Absent in records of plugins before MIG.
	MIG *MIG `json:"mig,omitempty"`
}

// MIG is a MIG partition of a prepared device: its card, profile and
// placement, and once created its GPU and compute instance and MIG device
// UUID. A record naming a card, profile and placement is how the plugin
// knows an instance there is its own (docs/prepare.md, "MIG").
type MIG struct {
	// ParentIndex is the card's index (device gpu-<ParentIndex>).
	ParentIndex int `json:"parentIndex"`
	// ProfileID is NVML's GPU instance profile ID; Profile its name
	// ("3g.40gb").
	ProfileID int    `json:"profileID"`
	Profile   string `json:"profile"`
	// Start and Size are the placement, in memory slices.
	Start int `json:"start"`
	Size  int `json:"size"`
	// GPUInstanceID and ComputeInstanceID are set once the instance was
	// created (nil: only the intent is recorded).
	GPUInstanceID     *int `json:"gpuInstanceID,omitempty"`
	ComputeInstanceID *int `json:"computeInstanceID,omitempty"`
	// UUID is the MIG device's UUID, "MIG-<uuid>", set with the IDs.
	UUID string `json:"uuid,omitempty"`
}

// Created reports whether the instance's creation was recorded.
func (m *MIG) Created() bool { return m != nil && m.GPUInstanceID != nil }

// GPUInstanceIDValue is the recorded GPU instance ID, -1 for none.
func (m *MIG) GPUInstanceIDValue() int {
	if !m.Created() {
		return -1
	}
	return *m.GPUInstanceID
}

// DeepCopy copies m, nil for nil.
func (m *MIG) DeepCopy() *MIG {
	if m == nil {
		return nil
	}
	out := *m
	if m.GPUInstanceID != nil {
		v := *m.GPUInstanceID
		out.GPUInstanceID = &v
	}
	if m.ComputeInstanceID != nil {
		v := *m.ComputeInstanceID
		out.ComputeInstanceID = &v
	}
	return &out
}

// MIGDevices returns the indexes of the claim's MIG partitions.
func (c Claim) MIGDevices() []int {
	var out []int
	for i, d := range c.Devices {
		if d.MIG != nil {
			out = append(out, i)
		}
	}
	return out
}

// UsesMPS reports whether the device is a share enforced by the node's MPS
// daemon, so that MPS accounting is done for it.
func (d Device) UsesMPS() bool { return d.Share && d.MPSPipeDir != "" }

// Kind is the kind of a prepared device, which decides what preparing it
// does (pkg/plugin/kinds) and what its status says.
type Kind string

const (
	// KindWholeCard: the card, held by this claim alone.
	KindWholeCard Kind = "whole-card"
	// KindAdminAccess: monitoring; the card is seen as it is, nothing is
	// held.
	KindAdminAccess Kind = "admin-access"
	// KindMPSShare: part of a card, its limits served by the node's MPS
	// daemon.
	KindMPSShare Kind = "mps-share"
	// KindShare: part of a card with sharing backend none, accounted by
	// the scheduler only.
	KindShare Kind = "share"
	// KindMIGPartition: a MIG partition of a card, held by the GPU.
	KindMIGPartition Kind = "mig-partition"
)

// Kind reads the device's kind from what the plan recorded (admin access,
// a MIG placement, a share and its backend). The one place the kinds are
// told apart; it is not stored, so records of every plugin version have
// one.
func (d Device) Kind() Kind {
	switch {
	case d.AdminAccess:
		return KindAdminAccess
	case d.MIG != nil:
		return KindMIGPartition
	case !d.Share:
		return KindWholeCard
	case d.UsesMPS():
		return KindMPSShare
	default:
		return KindShare
	}
}

// Key is "namespace/name", for messages.
func (c Claim) Key() string { return c.Namespace + "/" + c.Name }

// MPSCards returns the sorted, unique cards the claim holds MPS shares on.
func (c Claim) MPSCards() []string {
	var out []string
	for _, d := range c.Devices {
		if d.UsesMPS() {
			out = append(out, d.GPUUUID)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// MPSShares returns the claim's MPS shares with the limits their MPS
// namespace gets: the consumed memory, and the consumed compute or else the
// config's default active-thread percentage (the rule of the CDI edits).
func (c Claim) MPSShares() []mps.Share {
	var out []mps.Share
	for _, d := range c.Devices {
		if !d.UsesMPS() {
			continue
		}
		s := mps.Share{Card: d.GPUUUID, MemoryBytes: d.MemoryBytes, ThreadPercent: d.ComputePercent}
		if s.ThreadPercent == 0 && d.Config != nil && d.Config.Sharing != nil && d.Config.Sharing.MPS != nil &&
			d.Config.Sharing.MPS.DefaultActiveThreadPercentage != nil {
			s.ThreadPercent = int64(*d.Config.Sharing.MPS.DefaultActiveThreadPercentage)
		}
		out = append(out, s)
	}
	return out
}

// DeepCopy returns an independent copy, for callers that snapshot state
// before changing it.
func (c Claim) DeepCopy() Claim {
	out := c
	if c.Devices == nil {
		return out
	}
	out.Devices = make([]Device, len(c.Devices))
	for i, d := range c.Devices {
		d.CDIDeviceIDs = append([]string(nil), d.CDIDeviceIDs...)
		d.Config = d.Config.DeepCopy()
		d.MIG = d.MIG.DeepCopy()
		out.Devices[i] = d
	}
	return out
}

// deviceJSON reads Device with the config kept raw, so that it is decoded
// leniently: a downgraded plugin ignores config fields it does not know.
type deviceJSON struct {
	deviceFields
	Config json.RawMessage `json:"config,omitempty"`
}

// deviceFields is Device without its methods, to avoid recursion.
type deviceFields Device

// UnmarshalJSON decodes the embedded config with v1alpha1.DecodeLenient.
// (Marshalling uses the default encoder: a custom MarshalJSON makes
// encoding/json re-scan every device, which dominated the checkpoint's
// Save.)
func (d *Device) UnmarshalJSON(data []byte) error {
	var in deviceJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*d = Device(in.deviceFields)
	d.Config = nil
	raw := bytes.TrimSpace(in.Config)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		return fmt.Errorf("config of device %s: %w", d.Device, err)
	}
	if meta.APIVersion == "" && meta.Kind == "" {
		// Saved from a config that was never normalized; it is still ours.
		cfg := &v1alpha1.GpuConfig{}
		if err := json.Unmarshal(raw, cfg); err != nil {
			return fmt.Errorf("config of device %s: %w", d.Device, err)
		}
		cfg.APIVersion, cfg.Kind = v1alpha1.APIVersion, v1alpha1.Kind
		d.Config = cfg
		return nil
	}
	cfg, err := v1alpha1.DecodeLenient(raw)
	if err != nil {
		return fmt.Errorf("config of device %s: %w", d.Device, err)
	}
	d.Config = cfg
	return nil
}

// Package checkpoint persists which claims the kubelet plugin has prepared,
// so that prepare is idempotent and a restarted plugin knows what it owns.
//
// The file is versioned and checksummed:
//
//	{"version":"v1","checksum":"sha256:<hex of data>","data":{"bootID":"...","claims":{...}}}
//
// Each claim is in one of two states: PrepareStarted (written before any
// side effect) and PrepareCompleted (written after the CDI spec and MPS
// daemons are in place). A claim found PrepareStarted after a restart was
// interrupted and must be rolled back by the caller.
//
// Store.Save writes atomically (temp file in the same directory, fsync,
// rename, fsync of the directory). Store.Load never fails on bad content: a
// corrupt, unreadable or unknown-version file is moved aside to
// "<path>.corrupt-<timestamp>" and reported in LoadResult.Corrupt, with an
// empty checkpoint for the caller to rebuild from CDI specs and the API
// server. When the node's boot ID differs from the one in the file, the
// machine rebooted: nothing prepared before survives, so the claims are
// dropped and listed in LoadResult.Dropped.
package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tangram-gpu/tangram/api/gpu/v1alpha1"
)

// Version is the current file format version.
const Version = "v1"

// State is the prepare phase a claim reached.
type State string

const (
	// PrepareStarted is recorded before any side effect of prepare.
	PrepareStarted State = "PrepareStarted"
	// PrepareCompleted is recorded once the claim's CDI spec is written.
	PrepareCompleted State = "PrepareCompleted"
)

// Checkpoint is the plugin's prepared state, keyed by claim UID.
type Checkpoint struct {
	// BootID is the node boot ID the state belongs to; Save stamps it.
	BootID string           `json:"bootID"`
	Claims map[string]Claim `json:"claims"`
}

// New returns an empty checkpoint.
func New() *Checkpoint {
	return &Checkpoint{Claims: map[string]Claim{}}
}

// Claim is one prepared (or being prepared) claim.
type Claim struct {
	State     State  `json:"state"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Allocation is a digest of the allocation the claim was prepared
	// for: a claim allocated again differently keeps its UID.
	Allocation string   `json:"allocation,omitempty"`
	Devices    []Device `json:"devices,omitempty"`
}

// Device is one prepared device result of a claim.
type Device struct {
	Request string `json:"request"`
	// Device is the ResourceSlice device name, "gpu-<index>".
	Device  string `json:"device"`
	GPUUUID string `json:"gpuUUID,omitempty"`
	// ShareID is set for results on cards that allow multiple allocations.
	ShareID string `json:"shareID,omitempty"`
	// Share reports whether the result is isolated as a share (cdi.IsShare).
	Share          bool     `json:"share,omitempty"`
	CDIDeviceIDs   []string `json:"cdiDeviceIDs,omitempty"`
	MemoryBytes    int64    `json:"memoryBytes,omitempty"`
	ComputePercent int64    `json:"computePercent,omitempty"`
	// AdminAccess records the result's adminAccess flag: such a result
	// does not hold the card exclusively.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// MPSPipeDir is the MPS daemon pipe directory the share was given.
	MPSPipeDir string `json:"mpsPipeDir,omitempty"`
	// Config is the resolved config the device was prepared with.
	Config *v1alpha1.GpuConfig `json:"config,omitempty"`
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
// encoding/json re-scan every device, which dominated Save.)
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

// DeepCopy returns an independent copy, for callers that snapshot state
// before changing it.
func (c *Checkpoint) DeepCopy() *Checkpoint {
	out := &Checkpoint{BootID: c.BootID, Claims: make(map[string]Claim, len(c.Claims))}
	for uid, claim := range c.Claims {
		cc := claim
		cc.Devices = make([]Device, len(claim.Devices))
		for i, d := range claim.Devices {
			dc := d
			dc.CDIDeviceIDs = append([]string(nil), d.CDIDeviceIDs...)
			dc.Config = d.Config.DeepCopy()
			cc.Devices[i] = dc
		}
		if claim.Devices == nil {
			cc.Devices = nil
		}
		out.Claims[uid] = cc
	}
	return out
}

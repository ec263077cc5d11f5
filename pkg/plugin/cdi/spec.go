package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// specExt makes the CDI library write JSON, which every runtime parses.
const specExt = ".json"

// BuildSpec assembles the transient CDI spec of a claim: the devices from
// ComputeClaimEdits (in the order of the claim's devices, which it was
// computed from) plus the hardware edits of their cards (from cards, by
// device name), and the claim-wide device
// if there is one (it needs no hardware edits: a container given it also
// gets every other device of the claim).
func BuildSpec(edits *ClaimEdits, claim prepared.Claim, cards map[string]gpu.GPU, hw HardwareEdits) (*cdispec.Spec, error) {
	if len(edits.Devices) != len(claim.Devices) {
		return nil, fmt.Errorf("building CDI spec for claim %s: %d devices computed for %d results",
			edits.ClaimUID, len(edits.Devices), len(claim.Devices))
	}
	common, err := hw.CommonEdits()
	if err != nil {
		return nil, fmt.Errorf("building CDI spec for claim %s: driver files: %w", edits.ClaimUID, err)
	}
	// Hardware edits must not override the claim's variables: nvcdi, for
	// one, sets NVIDIA_VISIBLE_DEVICES=void to silence the legacy hook.
	ours := map[string]bool{}
	for _, d := range edits.Devices {
		for _, kv := range d.Edits.Env {
			key, _, _ := strings.Cut(kv, "=")
			ours[key] = true
		}
	}
	common.Env = withoutKeys(common.Env, ours)
	spec := &cdispec.Spec{
		Kind:           device.CDIKind,
		ContainerEdits: common,
	}
	for i, d := range edits.Devices {
		dev := claim.Devices[i].Device
		var cardEdits cdispec.ContainerEdits
		var err error
		if m := claim.Devices[i].MIG; m != nil {
			cardEdits, err = hw.MIGEdits(cards[device.CardDeviceName(m.ParentIndex)], *m)
		} else {
			cardEdits, err = hw.CardEdits(cards[dev])
		}
		if err != nil {
			return nil, fmt.Errorf("building CDI spec for claim %s: device nodes of %s: %w", edits.ClaimUID, dev, err)
		}
		e := copyEdits(d.Edits)
		e.DeviceNodes = append(e.DeviceNodes, cardEdits.DeviceNodes...)
		e.Mounts = append(e.Mounts, cardEdits.Mounts...)
		e.Hooks = append(e.Hooks, cardEdits.Hooks...)
		e.Env = append(e.Env, withoutKeys(cardEdits.Env, ours)...)
		spec.Devices = append(spec.Devices, cdispec.Device{Name: d.Name, ContainerEdits: e})
	}
	if cw := edits.ClaimWide; cw != nil {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: cw.Name, ContainerEdits: copyEdits(cw.Edits)})
	}
	// The lowest version that can express the spec, so older runtimes read it.
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("building CDI spec for claim %s: %w", edits.ClaimUID, err)
	}
	spec.Version = version
	return spec, nil
}

func withoutKeys(env []string, drop map[string]bool) []string {
	var out []string
	for _, kv := range env {
		key, _, _ := strings.Cut(kv, "=")
		if !drop[key] {
			out = append(out, kv)
		}
	}
	return out
}

// SpecStore keeps one transient spec per claim in a CDI spec directory.
//
// Spec files are not fsynced: the page cache survives a plugin crash, and a
// power loss changes the boot ID, after which all prepared state is dropped
// and re-prepared anyway.
type SpecStore struct {
	dir   string
	cache *cdiapi.Cache
}

// NewSpecStore uses dir (e.g. /var/run/cdi) for our specs, creating it if
// needed. Specs of other vendors in dir are left alone.
func NewSpecStore(dir string) (*SpecStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating CDI spec directory %s: %w", dir, err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		// The cache reports invalid specs of any vendor here; writing and
		// removing our own files still works, so only a nil cache is fatal.
		if cache == nil {
			return nil, fmt.Errorf("opening CDI spec directory %s: %w", dir, err)
		}
	}
	return &SpecStore{dir: dir, cache: cache}, nil
}

// Dir is the spec directory.
func (s *SpecStore) Dir() string { return s.dir }

// SpecName is the spec file name (without extension) of a claim.
func SpecName(claimUID string) string {
	return cdiapi.GenerateTransientSpecName(device.CDIVendor, device.CDIClass, claimUID)
}

// Path is where the spec of a claim is written.
func (s *SpecStore) Path(claimUID string) string {
	return filepath.Join(s.dir, SpecName(claimUID)+specExt)
}

// Write validates the spec with the CDI library and replaces the claim's
// spec file atomically (temp file + rename).
func (s *SpecStore) Write(claimUID string, spec *cdispec.Spec) error {
	if err := s.cache.WriteSpec(spec, SpecName(claimUID)+specExt); err != nil {
		return fmt.Errorf("writing CDI spec of claim %s to %s: %w", claimUID, s.dir, err)
	}
	return nil
}

// Read parses the claim's spec with the CDI library, which also validates it.
func (s *SpecStore) Read(claimUID string) (*cdispec.Spec, error) {
	spec, err := cdiapi.ReadSpec(s.Path(claimUID), 0)
	if err != nil {
		return nil, fmt.Errorf("reading CDI spec of claim %s: %w", claimUID, err)
	}
	return spec.Spec, nil
}

// Remove deletes the claim's spec; a missing spec is not an error.
func (s *SpecStore) Remove(claimUID string) error {
	if err := s.cache.RemoveSpec(SpecName(claimUID) + specExt); err != nil {
		return fmt.Errorf("removing CDI spec of claim %s from %s: %w", claimUID, s.dir, err)
	}
	// A spec could have been written in YAML by an older version; remove
	// that too so it cannot linger as an orphan.
	if err := os.Remove(filepath.Join(s.dir, SpecName(claimUID)+".yaml")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing CDI spec of claim %s from %s: %w", claimUID, s.dir, err)
	}
	return nil
}

// List returns the claim UIDs that have a spec of ours in the directory, for
// orphan cleanup at start-up. Files of other vendors are ignored.
func (s *SpecStore) List() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs in %s: %w", s.dir, err)
	}
	prefix := SpecName("")
	seen := map[string]bool{}
	var uids []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, prefix) {
			continue
		}
		ext := filepath.Ext(name)
		if ext != ".json" && ext != ".yaml" {
			continue
		}
		uid := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ext)
		if uid != "" && !seen[uid] {
			seen[uid] = true
			uids = append(uids, uid)
		}
	}
	return uids, nil
}

// ensure NoHardware satisfies the interface at compile time.
var _ HardwareEdits = NoHardware{}

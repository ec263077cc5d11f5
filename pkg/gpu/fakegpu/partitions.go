package fakegpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/google/uuid"

	"github.com/tangram-gpu/tangram/pkg/gpu"
)

// Partitions is the MIG instances of fake cards: what NVML's create,
// list and destroy calls would do on a card of the profile's MIG type
// (hack/mock-nvml/csrc/mig.inc does the same for the mock library), kept
// in a file so that instances outlive the plugin's process as they outlive
// it on a real card. Calls are serialized in the process; the plugin makes
// them under its state lock, which also orders its processes.
type Partitions struct {
	path string
	mu   sync.Mutex
}

var _ gpu.MIGPartitions = (*Partitions)(nil)

// PartitionsFileName is the state file's name in the plugin's state
// directory.
const PartitionsFileName = "fake-mig-instances.json"

// NewPartitions keeps the fake cards' MIG instances in path.
func NewPartitions(path string) *Partitions { return &Partitions{path: path} }

// partitionsFile is the file's content: each card's GPU instances by UUID.
type partitionsFile struct {
	Cards map[string][]fakeInstance `json:"cards"`
}

type fakeInstance struct {
	ProfileID     int  `json:"profileID"`
	Start         int  `json:"start"`
	Size          int  `json:"size"`
	GPUInstanceID int  `json:"gi"`
	HasCompute    bool `json:"ci"`
}

func (p *Partitions) load() (partitionsFile, error) {
	f := partitionsFile{Cards: map[string][]fakeInstance{}}
	raw, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("reading the fake MIG instances: %w", err)
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, fmt.Errorf("reading the fake MIG instances in %s (delete the file to start with no instances): %w", p.path, err)
	}
	if f.Cards == nil {
		f.Cards = map[string][]fakeInstance{}
	}
	return f, nil
}

func (p *Partitions) save(f partitionsFile) error {
	raw, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o700); err != nil {
		return fmt.Errorf("saving the fake MIG instances: %w", err)
	}
	tmp := p.path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("saving the fake MIG instances: %w", err)
	}
	if err := os.Rename(tmp, p.path); err != nil {
		return fmt.Errorf("saving the fake MIG instances: %w", err)
	}
	return nil
}

// fakeMIGUUID is the MIG device UUID of a fake card's compute instance:
// stable for the card and instance IDs, as the mock library's.
func fakeMIGUUID(cardUUID string, gi, ci int) string {
	return "MIG-" + uuid.NewSHA1(fakeUUIDNamespace, []byte(cardUUID+"/"+strconv.Itoa(gi)+"/"+strconv.Itoa(ci))).String()
}

func (i fakeInstance) instance(cardUUID string) gpu.MIGInstance {
	out := gpu.MIGInstance{ProfileID: i.ProfileID, Placement: gpu.MIGPlacement{Start: i.Start, Size: i.Size},
		GPUInstanceID: i.GPUInstanceID, ComputeInstanceID: -1}
	if i.HasCompute {
		out.ComputeInstanceID = 0
		out.UUID = fakeMIGUUID(cardUUID, i.GPUInstanceID, 0)
	}
	return out
}

// Create implements gpu.MIGPartitions.
func (p *Partitions) Create(_ context.Context, card gpu.GPU, profileID, start int) (gpu.MIGInstance, error) {
	if card.MIG == nil || !card.MIG.Enabled {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): %w", card.Index, card.UUID, gpu.ErrMIGNotEnabled)
	}
	profile, ok := card.MIG.Profile(profileID)
	if !ok {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s) has no MIG profile %d", card.Index, card.UUID, profileID)
	}
	placement, ok := profile.PlacementAt(start)
	if !ok {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): profile %s has no placement at memory slice %d", card.Index, card.UUID, profile.Name, start)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.load()
	if err != nil {
		return gpu.MIGInstance{}, err
	}
	existing := f.Cards[card.UUID]
	same := 0
	for _, i := range existing {
		if i.ProfileID == profileID {
			same++
		}
		if placement.Overlaps(gpu.MIGPlacement{Start: i.Start, Size: i.Size}) {
			return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): %s at %d: %w (%s)", card.Index, card.UUID, profile.Name, start,
				gpu.ErrMIGPlacementTaken, i.instance(card.UUID))
		}
	}
	if profile.Instances > 0 && same >= profile.Instances {
		return gpu.MIGInstance{}, fmt.Errorf("card %d (%s): %s: %w (%d of %d)", card.Index, card.UUID, profile.Name, gpu.ErrMIGOutOfResources, same, profile.Instances)
	}
	inst := f.add(card.UUID, fakeInstance{ProfileID: profileID, Start: placement.Start, Size: placement.Size, HasCompute: true})
	if err := p.save(f); err != nil {
		return gpu.MIGInstance{}, err
	}
	return inst.instance(card.UUID), nil
}

// CompleteComputeInstance implements gpu.MIGPartitions.
func (p *Partitions) CompleteComputeInstance(_ context.Context, card gpu.GPU, gpuInstanceID int) (gpu.MIGInstance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.load()
	if err != nil {
		return gpu.MIGInstance{}, err
	}
	for n, i := range f.Cards[card.UUID] {
		if i.GPUInstanceID != gpuInstanceID {
			continue
		}
		f.Cards[card.UUID][n].HasCompute = true
		if err := p.save(f); err != nil {
			return gpu.MIGInstance{}, err
		}
		return f.Cards[card.UUID][n].instance(card.UUID), nil
	}
	return gpu.MIGInstance{}, fmt.Errorf("card %d (%s) has no GPU instance %d", card.Index, card.UUID, gpuInstanceID)
}

// Destroy implements gpu.MIGPartitions.
func (p *Partitions) Destroy(_ context.Context, card gpu.GPU, gpuInstanceID int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.load()
	if err != nil {
		return err
	}
	before := len(f.Cards[card.UUID])
	f.Cards[card.UUID] = slices.DeleteFunc(f.Cards[card.UUID], func(i fakeInstance) bool { return i.GPUInstanceID == gpuInstanceID })
	if len(f.Cards[card.UUID]) == before {
		return nil
	}
	if len(f.Cards[card.UUID]) == 0 {
		delete(f.Cards, card.UUID)
	}
	return p.save(f)
}

// List implements gpu.MIGPartitions.
func (p *Partitions) List(_ context.Context, card gpu.GPU) ([]gpu.MIGInstance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.load()
	if err != nil {
		return nil, err
	}
	var out []gpu.MIGInstance
	for _, i := range f.Cards[card.UUID] {
		out = append(out, i.instance(card.UUID))
	}
	return out, nil
}

// add puts inst on the card under the lowest GPU instance ID the card does
// not use, keeping the card's instances sorted by placement, and returns
// it with its ID.
func (f partitionsFile) add(cardUUID string, inst fakeInstance) fakeInstance {
	used := map[int]bool{}
	for _, i := range f.Cards[cardUUID] {
		used[i.GPUInstanceID] = true
	}
	inst.GPUInstanceID = 1
	for used[inst.GPUInstanceID] {
		inst.GPUInstanceID++
	}
	f.Cards[cardUUID] = append(f.Cards[cardUUID], inst)
	slices.SortFunc(f.Cards[cardUUID], func(a, b fakeInstance) int { return a.Start - b.Start })
	return inst
}

// InjectGPUInstance adds a GPU instance without a compute instance, as a
// create interrupted between its two steps leaves one, or (withCompute) a
// full instance as an admin's nvidia-smi would: for tests.
func (p *Partitions) InjectGPUInstance(card gpu.GPU, profileID, start, size int, withCompute bool) (gpu.MIGInstance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := p.load()
	if err != nil {
		return gpu.MIGInstance{}, err
	}
	inst := f.add(card.UUID, fakeInstance{ProfileID: profileID, Start: start, Size: size, HasCompute: withCompute})
	return inst.instance(card.UUID), p.save(f)
}

// Path is the state file.
func (p *Partitions) Path() string { return p.path }

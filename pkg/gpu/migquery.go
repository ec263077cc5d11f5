package gpu

// MIGQuery is what NVML answers to the MIG queries for one card, whatever
// its MIG mode: the record gpu-check keeps of a real driver's profile and
// placement tables, to hold the mock's tables (pkg/gpu/fakegpu) and the
// plugin's profile names against (nvmlgpu.QueryMIG fills it).
type MIGQuery struct {
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Product    string `json:"product"`
	MemoryMiB  int64  `json:"memoryMiB"`
	ModeReturn string `json:"modeReturn"`
	Enabled    bool   `json:"enabled"`
	Pending    bool   `json:"pendingEnabled"`
	// Profiles holds every profile value NVML was asked for, until it said
	// INVALID_ARGUMENT, with what it returned.
	Profiles []MIGProfileQuery `json:"profiles"`
}

// MIGProfileQuery is NVML's answer for one profile value.
type MIGProfileQuery struct {
	Profile int    `json:"profile"`
	Return  string `json:"return"`
	// V1Return is what the v1 call (the inventory's) answered for a profile
	// the versioned query answered: SUCCESS when it agreed.
	V1Return string `json:"v1Return,omitempty"`
	// InfoVersion is the struct version that answered (3, 2 or 1).
	InfoVersion     int    `json:"infoVersion,omitempty"`
	ID              int    `json:"id,omitempty"`
	NVMLName        string `json:"nvmlName,omitempty"`
	TangramName     string `json:"tangramName,omitempty"`
	NameError       string `json:"nameError,omitempty"`
	ComputeSlices   int    `json:"computeSlices,omitempty"`
	Instances       int    `json:"instances,omitempty"`
	Multiprocessors int    `json:"multiprocessors,omitempty"`
	CopyEngines     int    `json:"copyEngines,omitempty"`
	Decoders        int    `json:"decoders,omitempty"`
	Encoders        int    `json:"encoders,omitempty"`
	JPEGs           int    `json:"jpegs,omitempty"`
	OFAs            int    `json:"ofas,omitempty"`
	MemoryMiB       uint64 `json:"memoryMiB,omitempty"`
	// PlacementsReturn is what the placement query returned.
	PlacementsReturn string         `json:"placementsReturn,omitempty"`
	Placements       []MIGPlacement `json:"placements,omitempty"`
}

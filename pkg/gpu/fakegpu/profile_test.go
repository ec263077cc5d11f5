package fakegpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func intPtr(i int) *int { return &i }

func TestParseProfileGood(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *Profile
	}{
		{
			name: "the issue's example card, fake-driver defaults filled in",
			yaml: `
gpus:
- index: 0
  productName: NVIDIA H100 80GB HBM3
  memory: 80Gi
  pciBusID: "0000:18:00.0"
  numaNode: 0
`,
			want: &Profile{GPUs: []ProfileGPU{{
				Index: 0, ProductName: "NVIDIA H100 80GB HBM3", Memory: "80Gi",
				PCIBusID: "0000:18:00.0", NUMANode: intPtr(0),
				Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0",
			}}},
		},
		{
			name: "one-sided NVLinks are made symmetric and sorted",
			yaml: `
name: triangle
defaults: {productName: X, memory: 1Gi}
gpus:
- {index: 0, nvlinks: [2, 1]}
- {index: 1}
- {index: 2}
- {index: 3}
`,
			want: &Profile{Name: "triangle", GPUs: []ProfileGPU{
				{Index: 0, ProductName: "X", Memory: "1Gi", NVLinks: []int{1, 2}, Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"},
				{Index: 1, ProductName: "X", Memory: "1Gi", NVLinks: []int{0}, Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"},
				{Index: 2, ProductName: "X", Memory: "1Gi", NVLinks: []int{0}, Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"},
				{Index: 3, ProductName: "X", Memory: "1Gi", Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"},
			}},
		},
		{
			name: "every optional field, card values override defaults, null means unset",
			yaml: `
defaults:
  productName: Default Product
  memory: 40Gi
  brand: Tesla
  architecture: ampere
  cudaComputeCapability: "8.0"
  driverVersion: 550.54.15
  cudaDriverVersion: 12.4
  fabricCliqueID: default/1
gpus:
- index: 3
  minor: 7
  productName: Card Product
  memory: 1.5Gi
  pciBusID: "00000000:1B:00.0"
  numaNode: ~
  architecture: hopper
  cudaComputeCapability: 9.0
  driverVersion: "580.95.05"
  cudaDriverVersion: "13.0"
  fabricCliqueID: 11111111-2222-3333-4444-555555555555/7
  brand: Nvidia
`,
			want: &Profile{GPUs: []ProfileGPU{{
				Index: 3, Minor: intPtr(7), ProductName: "Card Product", Memory: "1.5Gi",
				PCIBusID: "00000000:1B:00.0", Brand: "Nvidia", Architecture: "hopper",
				CUDAComputeCapability: "9.0", DriverVersion: "580.95.05", CUDADriverVersion: "13.0",
				FabricCliqueID: "11111111-2222-3333-4444-555555555555/7",
			}}},
		},
		{
			name: "document markers around a single document",
			yaml: "---\ngpus:\n- {index: 0, productName: X, memory: 1Gi}\n---\n",
			want: &Profile{GPUs: []ProfileGPU{{Index: 0, ProductName: "X", Memory: "1Gi", Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"}}},
		},
		{
			name: "anchors and aliases are followed",
			yaml: `
gpus:
- &card {index: 0, productName: X, memory: 2Gi, numaNode: 1}
- {index: 1, productName: X, memory: 2Gi, nvlinks: &links [0]}
`,
			want: &Profile{GPUs: []ProfileGPU{
				{Index: 0, ProductName: "X", Memory: "2Gi", NUMANode: intPtr(1), NVLinks: []int{1}, Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"},
				{Index: 1, ProductName: "X", Memory: "2Gi", NVLinks: []int{0}, Brand: "Nvidia", DriverVersion: "580.95.05", CUDADriverVersion: "13.0"},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProfile([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParseProfile: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("profile (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseProfileBad(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{
			name: "empty file",
			yaml: "  \n",
			want: "the profile is empty: list the cards under gpus:",
		},
		{
			name: "only a comment",
			yaml: "# nothing\n",
			want: "the profile is empty: list the cards under gpus:",
		},
		{
			name: "only a document marker",
			yaml: "---\n",
			want: "the profile is empty: list the cards under gpus:",
		},
		{
			name: "a second document would be ignored",
			yaml: "gpus:\n- {index: 0, productName: X, memory: 1Gi}\n---\ngpus: []\n",
			want: "line 3: a second YAML document (after ---): put all cards in one gpus: list",
		},
		{
			name: "tab indentation",
			yaml: "gpus:\n\t- index: 0\n",
			want: "line 2: invalid YAML: found character that cannot start any token",
		},
		{
			name: "not YAML",
			yaml: "gpus:\n- index: 0\n  memory: [\n",
			want: "line 3: invalid YAML: did not find expected node content",
		},
		{
			name: "top level is a list",
			yaml: "- index: 0\n",
			want: `line 1: the profile must be a mapping with a gpus: list, got a list`,
		},
		{
			name: "gpus missing, typo reported too",
			yaml: "gpu:\n- index: 0\n",
			want: "line 1: gpu: unknown field (valid fields: defaults, gpus, name)\n" +
				"line 1: gpus: missing: list the cards under gpus:",
		},
		{
			name: "empty list",
			yaml: "gpus: []\n",
			want: "line 1: gpus: the list is empty: a profile needs at least one card",
		},
		{
			name: "gpus is a mapping",
			yaml: "gpus:\n  index: 0\n",
			want: `line 2: gpus: must be a list of cards, got a mapping`,
		},
		{
			name: "card is not a mapping",
			yaml: "gpus:\n- 0\n",
			want: `line 2: gpus[0]: must be a mapping of fields, got "0"`,
		},
		{
			name: "bad memory quantity (the issue's example)",
			yaml: `gpus:
- index: 0
  productName: X
  memory: 80Gi
- index: 1
  productName: X
  memory: 80Gx
`,
			want: `line 7: gpus[1].memory: "80Gx" is not a quantity (use e.g. 80Gi)`,
		},
		{
			name: "memory zero, negative, fractional bytes, missing",
			yaml: `defaults: {productName: X}
gpus:
- {index: 0, memory: 0}
- {index: 1, memory: -1Gi}
- {index: 2, memory: 100m}
- {index: 3}
`,
			want: `line 3: gpus[0].memory: "0" must be more than zero
line 4: gpus[1].memory: "-1Gi" must be more than zero
line 5: gpus[2].memory: "100m" is not a whole number of bytes (use e.g. 80Gi)
line 6: gpus[3].memory: missing: the card's total memory as a quantity (e.g. memory: 80Gi)`,
		},
		{
			name: "bad default memory is reported once, at the default",
			yaml: `defaults: {productName: X, memory: lots}
gpus:
- {index: 0}
- {index: 1}
`,
			want: `line 1: defaults.memory: "lots" is not a quantity (use e.g. 80Gi)`,
		},
		{
			name: "unknown field and duplicate key",
			yaml: `gpus:
- index: 0
  productName: X
  memory: 1Gi
  memroy: 2Gi
  index: 1
`,
			want: `line 5: gpus[0].memroy: unknown field (valid fields: architecture, brand, cudaComputeCapability, cudaDriverVersion, driverVersion, fabricCliqueID, index, memory, migMode, migPendingMode, migType, minor, numaNode, nvlinks, pciBusID, productName)
line 6: gpus[0].index: given twice (first on line 2)`,
		},
		{
			name: "unknown default field",
			yaml: "defaults: {pciBusID: \"0000:01:00.0\"}\ngpus:\n- {index: 0, productName: X, memory: 1Gi}\n",
			want: `line 1: defaults.pciBusID: unknown field (valid fields: architecture, brand, cudaComputeCapability, cudaDriverVersion, driverVersion, fabricCliqueID, memory, migMode, migPendingMode, migType, productName)`,
		},
		{
			name: "duplicate index, missing index, wrong types",
			yaml: `defaults: {productName: X, memory: 1Gi}
gpus:
- {index: 0}
- {index: 0}
- {numaNode: 0}
- {index: two}
- {index: 4, numaNode: 1.5, productName: [a]}
`,
			want: `line 4: gpus[1].index: 0 is already the index of gpus[0]: every card needs its own index
line 5: gpus[2]: missing field "index" (the card's NVML index, e.g. index: 0)
line 6: gpus[3].index: "two" is not a whole number
line 7: gpus[4].numaNode: "1.5" is not a whole number
line 7: gpus[4].productName: must be a single value, got a list`,
		},
		{
			name: "negative values",
			yaml: `defaults: {productName: X, memory: 1Gi}
gpus:
- {index: -1}
- {index: 1, minor: -2}
- {index: 2, numaNode: -1}
`,
			want: `line 3: gpus[0].index: must not be negative, got -1
line 4: gpus[1].minor: must not be negative, got -2
line 5: gpus[2].numaNode: must not be negative, got -1 (leave the field out when unknown)`,
		},
		{
			name: "duplicate minor, including the index default",
			yaml: `defaults: {productName: X, memory: 1Gi}
gpus:
- {index: 0}
- {index: 1, minor: 0}
`,
			want: `line 4: gpus[1].minor: 0 is already the minor number of gpus[0] (minor defaults to the index)`,
		},
		{
			name: "bad and duplicate PCI bus IDs",
			yaml: `defaults: {productName: X, memory: 1Gi}
gpus:
- {index: 0, pciBusID: "18:00.0"}
- {index: 1, pciBusID: "0000:18:20.0"}
- {index: 2, pciBusID: "0000:18:00.8"}
- {index: 3, pciBusID: "0000:18:00.0"}
- {index: 4, pciBusID: "00000000:18:00.0"}
`,
			want: `line 3: gpus[0].pciBusID: "18:00.0" is not a PCI bus ID (use domain:bus:device.function, e.g. "0000:18:00.0")
line 4: gpus[1].pciBusID: "0000:18:20.0" is not a PCI bus ID: device 20 is above 1f
line 5: gpus[2].pciBusID: "0000:18:00.8" is not a PCI bus ID (use domain:bus:device.function, e.g. "0000:18:00.0")
line 7: gpus[4].pciBusID: "00000000:18:00.0" is already the PCI bus ID of gpus[3]`,
		},
		{
			name: "bad NVLinks: self, missing card, twice, not a list",
			yaml: `defaults: {productName: X, memory: 1Gi}
gpus:
- index: 0
  nvlinks:
  - 0
  - 1
  - 9
  - 1
- {index: 1, nvlinks: 0}
`,
			want: `line 5: gpus[0].nvlinks[0]: card 0 cannot have an NVLink to itself
line 7: gpus[0].nvlinks[2]: there is no card with index 9 (indexes in this profile: [0 1])
line 8: gpus[0].nvlinks[3]: card 1 is listed twice
line 9: gpus[1].nvlinks: must be a list of card indexes such as [1, 2], got "0"`,
		},
		{
			name: "bad versions and architecture",
			yaml: `defaults: {productName: X, memory: 1Gi}
gpus:
- index: 0
  architecture: Hopper
  cudaComputeCapability: "9"
  driverVersion: "r580"
  cudaDriverVersion: 13.0.1
  productName: ""
`,
			want: `line 4: gpus[0].architecture: "Hopper" is not a lower-case architecture name (e.g. hopper, ampere, ada-lovelace)
line 5: gpus[0].cudaComputeCapability: "9" is not <major>.<minor> (e.g. "9.0")
line 6: gpus[0].driverVersion: "r580" is not a driver version (e.g. "580.95.05")
line 7: gpus[0].cudaDriverVersion: "13.0.1" is not <major>.<minor> (e.g. "13.0")
line 8: gpus[0].productName: must not be empty (leave the field out instead)`,
		},
		{
			name: "bad MIG fields",
			yaml: `defaults: {productName: X, memory: 80Gi}
gpus:
- {index: 0, migType: h100-94gb}
- {index: 1, migType: h100-80gb, migMode: on}
- {index: 2, migMode: enabled}
- {index: 3, migType: a100-80gb, migPendingMode: Enabled}
- {index: 4, migType: a100-40gb}
`,
			want: `line 3: gpus[0].migType: "h100-94gb" is not a MIG card type this fake knows (known: a100-40gb, a100-80gb, h100-80gb, h200-141gb)
line 4: gpus[1].migMode: "on" is not a MIG mode: want "enabled" or "disabled"
line 5: gpus[2].migMode: is set but the card has no migType: name its MIG card type (one of a100-40gb, a100-80gb, h100-80gb, h200-141gb) or leave the mode out
line 6: gpus[3].migPendingMode: "Enabled" is not a MIG mode: want "enabled" or "disabled"
line 7: gpus[4].migType: "a100-40gb" is for cards of about 40 GiB, but the card's memory is 80Gi: give the card that memory or the MIG type of its size`,
		},
		{
			name: "missing product name",
			yaml: "gpus:\n- {index: 0, memory: 1Gi}\n",
			want: `line 2: gpus[0].productName: missing (e.g. productName: "NVIDIA H100 80GB HBM3", or set it under defaults:)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseProfile accepted a bad profile: %+v", p)
			}
			if p != nil {
				t.Errorf("ParseProfile returned a profile with an error: %+v", p)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadProfileFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "gpus.yaml")
	named := filepath.Join(dir, "named.yaml")
	for path, content := range map[string]string{
		good:  "gpus:\n- {index: 0, productName: X, memory: 1Gi}\n",
		named: "name: lab\ngpus:\n- {index: 0, productName: X, memory: 1Gi}\n",
		bad:   "gpus:\n- index: 0\n  productName: X\n  memory: 80Gi\n- index: 1\n  productName: X\n  memory: 80Gx\n- {index: 1, productName: X, memory: 1Gi}\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	p, err := LoadProfileFile(good)
	if err != nil {
		t.Fatalf("LoadProfileFile(good): %v", err)
	}
	if p.Name != good || len(p.GPUs) != 1 {
		t.Errorf("LoadProfileFile(good) = %+v, want name %q and one card", p, good)
	}
	if p, err := LoadProfileFile(named); err != nil || p.Name != "lab" {
		t.Errorf("LoadProfileFile(named) = %+v, %v; want name lab", p, err)
	}

	_, err = LoadProfileFile(bad)
	want := "profile " + bad + `: line 7: gpus[1].memory: "80Gx" is not a quantity (use e.g. 80Gi)` + "\n" +
		"profile " + bad + `: line 8: gpus[2].index: 1 is already the index of gpus[1]: every card needs its own index`
	if err == nil || err.Error() != want {
		t.Errorf("LoadProfileFile(bad) error =\n%v\nwant\n%s", err, want)
	}

	missing := filepath.Join(dir, "missing.yaml")
	_, err = LoadProfileFile(missing)
	if err == nil || !strings.HasPrefix(err.Error(), "reading profile "+missing+": ") || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("LoadProfileFile(missing) error = %v, want a wrapped not-exist error", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestProfileValidate(t *testing.T) {
	tests := []struct {
		name    string
		profile *Profile
		want    string
	}{
		{name: "nil", profile: nil, want: "no profile given"},
		{name: "no cards", profile: &Profile{Name: "p"}, want: "profile p: gpus: the list is empty: a profile needs at least one card"},
		{
			name: "bad card without line numbers",
			profile: &Profile{Name: "p", GPUs: []ProfileGPU{
				{Index: 0, ProductName: "X", Memory: "1Gi", NVLinks: []int{5}},
			}},
			want: "profile p: gpus[0].nvlinks[0]: there is no card with index 5 (indexes in this profile: [0])",
		},
		{
			name:    "good",
			profile: &Profile{GPUs: []ProfileGPU{{Index: 0, ProductName: "X", Memory: "1Gi"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.profile.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDocumentedExample keeps the example in docs/fake-gpus.md valid.
func TestDocumentedExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/fake-gpus.md")
	if err != nil {
		t.Fatalf("reading the docs: %v", err)
	}
	_, rest, found := strings.Cut(string(doc), "```yaml\n")
	example, _, closed := strings.Cut(rest, "```")
	if !found || !closed {
		t.Fatal("docs/fake-gpus.md has no ```yaml example")
	}
	p, err := ParseProfile([]byte(example))
	if err != nil {
		t.Fatalf("the documented example does not parse:\n%v", err)
	}
	if p.Name != "lab-h100" || len(p.GPUs) != 5 {
		t.Fatalf("example = %q with %d cards, want lab-h100 with 5", p.Name, len(p.GPUs))
	}
	wantLinks := [][]int{{1, 2, 3}, {0}, {0}, {0}, nil}
	for i, g := range p.GPUs {
		if !cmp.Equal(g.NVLinks, wantLinks[i]) {
			t.Errorf("card %d nvlinks = %v, want %v", i, g.NVLinks, wantLinks[i])
		}
	}
	if g := p.GPUs[4]; g.ProductName != "NVIDIA L4" || g.Memory != "24Gi" || g.Architecture != "ada-lovelace" {
		t.Errorf("card 4 did not override the defaults: %+v", g)
	}
}

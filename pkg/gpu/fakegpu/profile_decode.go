package fakegpu

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// The profile decoder walks the yaml.Node tree by hand instead of using
// yaml.Unmarshal into structs: that is the only way to report the line of
// every bad value, reject unknown fields with the list of valid ones, and
// carry on to report all problems at once.

var (
	topLevelFields = []string{"defaults", "gpus", "name"}
	// defaultFields are the fields "defaults:" may set for every card.
	defaultFields = []string{
		"architecture", "brand", "cudaComputeCapability", "cudaDriverVersion",
		"driverVersion", "fabricCliqueID", "memory", "migMode", "migPendingMode", "migType", "productName",
	}
	gpuFields = []string{
		"architecture", "brand", "cudaComputeCapability", "cudaDriverVersion",
		"driverVersion", "fabricCliqueID", "index", "memory", "migMode", "migPendingMode",
		"migType", "minor", "numaNode", "nvlinks", "pciBusID", "productName",
	}
	yamlErrorLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
)

// fieldPos is where a card's field was written: its line and the path to
// name in an error (a value inherited from defaults: points there).
type fieldPos struct {
	line int
	path string
}

// gpuPositions remembers where each card and its fields are in the file so
// that validation, which runs on the decoded Profile, can point at lines.
type gpuPositions struct {
	line    int
	fields  map[string]fieldPos
	nvlinks []int
}

type profilePositions struct {
	gpusLine int
	gpus     []gpuPositions
}

type profileDecoder struct {
	problems []ProfileProblem
	pos      profilePositions
	// fatal is set when there is no card list to validate.
	fatal bool
	// badFields are the paths already reported while decoding; validation
	// stays quiet about them (a value that failed to decode looks missing).
	badFields map[string]bool
}

// validateDecoded runs the value checks after decoding, so that one run
// reports structural and value problems together, without repeating a
// field that already failed to decode.
func (d *profileDecoder) validateDecoded(p *Profile) {
	if d.fatal {
		return
	}
	decoded, bad := d.problems, d.badFields
	d.problems, d.badFields = nil, nil
	validateProfile(d, p)
	kept := decoded
	for _, pr := range d.problems {
		if !bad[pr.Field] {
			kept = append(kept, pr)
		}
	}
	d.problems = kept
}

func newProfileDecoder() *profileDecoder { return &profileDecoder{} }

func (d *profileDecoder) addf(line int, field, format string, args ...any) {
	if d.badFields == nil {
		d.badFields = map[string]bool{}
	}
	d.badFields[field] = true
	d.problems = append(d.problems, ProfileProblem{Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// sortedProblems orders problems by line and drops repeats (a bad default
// is reported once, not once per card).
func (d *profileDecoder) sortedProblems() []ProfileProblem {
	sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
	out := d.problems[:0]
	seen := map[ProfileProblem]bool{}
	for _, p := range d.problems {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

const emptyProfile = "the profile is empty: list the cards under gpus:"

// fatalf records a problem that leaves nothing to validate.
func (d *profileDecoder) fatalf(line int, field, format string, args ...any) {
	d.addf(line, field, format, args...)
	d.fatal = true
}

// document returns the root node of the file's one YAML document, or nil
// after recording why there is none.
func (d *profileDecoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) || (err == nil && emptyDocument(&doc)) {
		d.fatalf(0, "", emptyProfile) // nothing, or only comments and "---"
		return nil
	}
	// Further documents would be ignored without a word: refuse them,
	// except empty ones (a trailing "---").
	for err == nil {
		var next yaml.Node
		if err = dec.Decode(&next); err == nil && !emptyDocument(&next) {
			d.fatalf(next.Line, "", "a second YAML document (after ---): put all cards in one gpus: list")
			return nil
		}
	}
	if !errors.Is(err, io.EOF) {
		msg := err.Error()
		if m := yamlErrorLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			d.fatalf(line, "", "invalid YAML: %s", m[2])
		} else {
			d.fatalf(0, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
		}
		return nil
	}
	return resolve(doc.Content[0])
}

func (d *profileDecoder) decode(data []byte) *Profile {
	p := &Profile{}
	root := d.document(data)
	if root == nil {
		return p
	}
	var defaults, gpus *yaml.Node
	d.mapping(root, "", topLevelFields, func(key string, keyNode, val *yaml.Node) {
		switch key {
		case "name":
			p.Name, _ = d.str(val, "name")
		case "defaults":
			defaults = val
		case "gpus":
			d.pos.gpusLine = keyNode.Line
			gpus = val
		}
	})
	defaultValues := d.defaults(defaults)
	if gpus == nil {
		if root.Kind == yaml.MappingNode {
			d.addf(root.Line, "gpus", "missing: list the cards under gpus:")
		}
		d.fatal = true
		return p
	}
	if gpus.Kind != yaml.SequenceNode {
		d.fatalf(gpus.Line, "gpus", "must be a list of cards, got %s", describe(gpus))
		return p
	}
	if len(gpus.Content) == 0 {
		d.fatalf(gpus.Line, "gpus", "the list is empty: a profile needs at least one card")
		return p
	}
	for i, n := range gpus.Content {
		g, pos := d.gpu(resolve(n), fmt.Sprintf("gpus[%d]", i), defaultValues)
		p.GPUs = append(p.GPUs, g)
		d.pos.gpus = append(d.pos.gpus, pos)
	}
	return p
}

// defaultValue is a value from "defaults:" and where it was written.
type defaultValue struct {
	value string
	pos   fieldPos
}

func (d *profileDecoder) defaults(n *yaml.Node) map[string]defaultValue {
	out := map[string]defaultValue{}
	if n == nil {
		return out
	}
	d.mapping(n, "defaults", defaultFields, func(key string, _, val *yaml.Node) {
		path := "defaults." + key
		if s, ok := d.str(val, path); ok {
			out[key] = defaultValue{value: s, pos: fieldPos{line: val.Line, path: path}}
		}
	})
	return out
}

func (d *profileDecoder) gpu(n *yaml.Node, path string, defaults map[string]defaultValue) (ProfileGPU, gpuPositions) {
	var g ProfileGPU
	pos := gpuPositions{line: n.Line, fields: map[string]fieldPos{}}
	seenIndex := false
	d.mapping(n, path, gpuFields, func(key string, _, val *yaml.Node) {
		fp := path + "." + key
		pos.fields[key] = fieldPos{line: val.Line, path: fp}
		switch key {
		case "index":
			seenIndex = true
			if v, ok := d.int(val, fp); ok {
				g.Index = v
			}
		case "minor":
			if v, ok := d.int(val, fp); ok {
				g.Minor = &v
			}
		case "numaNode":
			if v, ok := d.int(val, fp); ok {
				g.NUMANode = &v
			}
		case "nvlinks":
			g.NVLinks, pos.nvlinks = d.intList(val, fp)
		default:
			if s, ok := d.str(val, fp); ok {
				if f := stringField(&g, key); f != nil {
					*f = s
				}
			}
		}
	})
	if n.Kind != yaml.MappingNode {
		d.fatal = true // nothing to validate; the card's own problem says why
		return g, pos
	}
	for key, dv := range defaults {
		if f := stringField(&g, key); f != nil && pos.fields[key] == (fieldPos{}) {
			*f = dv.value
			pos.fields[key] = dv.pos
		}
	}
	// The fake driver, for files that do not name one.
	for key, v := range map[string]string{
		"brand":             DefaultFakeBrand,
		"driverVersion":     DefaultFakeDriverVersion,
		"cudaDriverVersion": DefaultFakeCUDADriverVersion,
	} {
		if f := stringField(&g, key); f != nil && *f == "" {
			*f = v
		}
	}
	if !seenIndex {
		d.addf(n.Line, path, `missing field "index" (the card's NVML index, e.g. index: 0)`)
		d.badFields[path+".index"] = true
	}
	return g, pos
}

// stringField maps a YAML key to the string field it fills; nil for keys
// that are not strings.
func stringField(g *ProfileGPU, key string) *string {
	switch key {
	case "productName":
		return &g.ProductName
	case "memory":
		return &g.Memory
	case "pciBusID":
		return &g.PCIBusID
	case "brand":
		return &g.Brand
	case "architecture":
		return &g.Architecture
	case "cudaComputeCapability":
		return &g.CUDAComputeCapability
	case "driverVersion":
		return &g.DriverVersion
	case "cudaDriverVersion":
		return &g.CUDADriverVersion
	case "fabricCliqueID":
		return &g.FabricCliqueID
	case "migType":
		return &g.MIGType
	case "migMode":
		return &g.MIGMode
	case "migPendingMode":
		return &g.MIGPendingMode
	}
	return nil
}

// mapping checks that n is a mapping with only the given keys, each once,
// and calls fn for each key whose value is not null (null means "not set").
func (d *profileDecoder) mapping(n *yaml.Node, path string, fields []string, fn func(key string, keyNode, val *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		what := path
		if what == "" {
			d.addf(n.Line, "", "the profile must be a mapping with a gpus: list, got %s", describe(n))
			return
		}
		d.addf(n.Line, what, "must be a mapping of fields, got %s", describe(n))
		return
	}
	firstLine := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		key := k.Value
		fp := key
		if path != "" {
			fp = path + "." + key
		}
		if !contains(fields, key) {
			d.addf(k.Line, fp, "unknown field (valid fields: %s)", strings.Join(fields, ", "))
			continue
		}
		if first, dup := firstLine[key]; dup {
			d.addf(k.Line, fp, "given twice (first on line %d)", first)
			continue
		}
		firstLine[key] = k.Line
		if isNull(v) {
			continue
		}
		fn(key, k, v)
	}
}

func (d *profileDecoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.addf(n.Line, path, "must be a single value, got %s", describe(n))
		return "", false
	}
	if strings.TrimSpace(n.Value) == "" {
		d.addf(n.Line, path, "must not be empty (leave the field out instead)")
		return "", false
	}
	return n.Value, true
}

func (d *profileDecoder) int(n *yaml.Node, path string) (int, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.addf(n.Line, path, "%s is not a whole number", describe(n))
		return 0, false
	}
	var v int
	if err := n.Decode(&v); err != nil {
		d.addf(n.Line, path, "%q is not a whole number that fits in an int", n.Value)
		return 0, false
	}
	return v, true
}

func (d *profileDecoder) intList(n *yaml.Node, path string) ([]int, []int) {
	if n.Kind != yaml.SequenceNode {
		d.addf(n.Line, path, "must be a list of card indexes such as [1, 2], got %s", describe(n))
		return nil, nil
	}
	vals := make([]int, 0, len(n.Content))
	lines := make([]int, 0, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item)
		if v, ok := d.int(item, fmt.Sprintf("%s[%d]", path, i)); ok {
			vals = append(vals, v)
			lines = append(lines, item.Line)
		}
	}
	return vals, lines
}

// resolve follows YAML aliases (*anchor) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// emptyDocument is true for a document with nothing in it but comments
// or "---".
func emptyDocument(doc *yaml.Node) bool {
	return len(doc.Content) == 0 || isNull(doc.Content[0])
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names a node for an error message: a scalar by its value, the
// rest by their kind.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return "an unsupported YAML node"
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

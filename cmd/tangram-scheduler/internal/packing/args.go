package packing

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// decodeArgs reads the plugin's args strictly: an unknown field is an error
// naming it, so a typo in the scheduler configuration is not ignored.
func decodeArgs(raw []byte, args *Args) error {
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fmt.Errorf("parsing: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(args); err != nil {
		return fmt.Errorf("decoding (known field: policy): %w", err)
	}
	return nil
}

package nvidia

import "github.com/tangram-gpu/tangram/pkg/plugin/cdi"

// Both builds must satisfy the interface the spec builder uses.
var _ cdi.HardwareEdits = (*Hardware)(nil)

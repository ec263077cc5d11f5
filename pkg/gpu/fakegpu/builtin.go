package fakegpu

import (
	"embed"
	"fmt"
	"path"
	"sort"
	"strings"
)

// The built-in profiles are ordinary profile files, so they double as
// examples of the format and go through the same checks as users' files.
//
//go:embed profiles/*.yaml
var builtinProfiles embed.FS

// BuiltinProfileNames returns the names of the built-in profiles, sorted.
func BuiltinProfileNames() []string {
	entries, err := builtinProfiles.ReadDir("profiles")
	if err != nil { // cannot happen with a valid go:embed pattern
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// BuiltinProfile returns a fresh copy of the named built-in profile; the
// caller may change it.
func BuiltinProfile(name string) (*Profile, error) {
	data, err := builtinProfiles.ReadFile(path.Join("profiles", name+".yaml"))
	if err != nil || name == "" || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("unknown built-in GPU profile %q (valid: %s)", name, strings.Join(BuiltinProfileNames(), ", "))
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("built-in profile %s: %w", name, err)
	}
	p.Name = name
	return p, nil
}

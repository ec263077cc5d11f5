package driver

import "sort"

func sortedRecordKeys(m map[string]ClaimRecord) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

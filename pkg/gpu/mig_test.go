package gpu

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
)

// TestLogMIG: one line per card in MIG mode (published as partitions), one
// per card whose mode change waits for a reset, nothing for other cards.
func TestLogMIG(t *testing.T) {
	var lines []string
	logger := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})
	LogMIG(logger, []GPU{
		{Index: 0, UUID: "GPU-a"},
		{Index: 1, UUID: "GPU-b", MIG: &MIG{}},
		{Index: 2, UUID: "GPU-c", MIG: &MIG{Enabled: true, PendingEnabled: true, Profiles: []MIGProfile{{Name: "1g.10gb"}, {Name: "7g.80gb"}}}},
		{Index: 3, UUID: "GPU-d", MIG: &MIG{PendingEnabled: true}},
	})
	var got []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, MIGPartitionsMessage):
			got = append(got, "partitions "+field(l, "uuid")+" "+field(l, "migProfiles"))
		case strings.Contains(l, MIGPendingMessage):
			got = append(got, "pending "+field(l, "uuid"))
		default:
			got = append(got, "other "+l)
		}
	}
	want := []string{`partitions "GPU-c" ["1g.10gb" "7g.80gb"]`, `pending "GPU-d"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

// field is the value of "key"=... in a funcr line.
func field(line, key string) string {
	_, rest, ok := strings.Cut(line, `"`+key+`"=`)
	if !ok {
		return ""
	}
	if strings.HasPrefix(rest, "[") {
		v, _, _ := strings.Cut(rest, "]")
		return v + "]"
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

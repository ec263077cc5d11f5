package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Moved-aside checkpoints are kept for diagnosis, but not for ever: Load
// keeps the newest MaxCorruptKept and none older than CorruptMaxAge, and
// leaves every other file alone.
func TestMovedAsideCheckpointsAreBounded(t *testing.T) {
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// corruptAt are the times of successive corrupt loads; loadAt is
		// the time of a final, good load.
		corruptAt []time.Time
		loadAt    time.Time
		wantKept  []time.Time
	}{
		{
			name:      "count: the newest are kept",
			corruptAt: hours(base, 0, 1, 2, 3, 4, 5, 6, 7),
			loadAt:    base.Add(8 * time.Hour),
			wantKept:  hours(base, 3, 4, 5, 6, 7),
		},
		{
			name:      "age: older than the limit are removed at the next load",
			corruptAt: hours(base, 0, 1),
			loadAt:    base.Add(DefaultCorruptMaxAge + 30*time.Minute),
			wantKept:  hours(base, 1),
		},
		{
			name:      "few and recent: all kept",
			corruptAt: hours(base, 0, 1),
			loadAt:    base.Add(2 * time.Hour),
			wantKept:  hours(base, 0, 1),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := base
			dir := t.TempDir()
			s := NewStore(filepath.Join(dir, "checkpoint.json"),
				WithBootID(func() (string, error) { return boot1, nil }),
				WithClock(func() time.Time { return now }))
			// Not ours: never removed.
			others := []string{"checkpoint.json.corrupt-by-hand", "other.json.corrupt-20200101T000000.000000000Z", "notes.txt"}
			for _, name := range others {
				if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			for _, at := range tt.corruptAt {
				now = at
				if err := os.WriteFile(s.Path(), []byte("{broken"), 0o600); err != nil {
					t.Fatal(err)
				}
				res, err := s.Load()
				if err != nil || res.Corrupt == nil || res.Corrupt.MovedTo == "" {
					t.Fatalf("corrupt load at %s: %v %+v", at, err, res)
				}
			}
			now = tt.loadAt
			if err := s.Save(New()); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Load(); err != nil || res.Corrupt != nil {
				t.Fatalf("good load: %v %+v", err, res)
			}
			var want []string
			for _, at := range tt.wantKept {
				want = append(want, "checkpoint.json.corrupt-"+at.Format(movedAsideTimeFormat))
			}
			want = append(want, others...)
			want = append(want, "checkpoint.json")
			slices.Sort(want)
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, want) {
				t.Errorf("files\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func hours(base time.Time, hs ...int) []time.Time {
	var out []time.Time
	for _, h := range hs {
		out = append(out, base.Add(time.Duration(h)*time.Hour))
	}
	return out
}

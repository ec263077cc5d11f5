package probe

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tangram-gpu/tangram/pkg/gpucheck"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/control"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/daemon"
	"github.com/tangram-gpu/tangram/pkg/plugin/mps/mpsv3"
)

// DefaultMPSRoot is the chart's kubeletPlugin.hostPaths.mpsRoot.
const DefaultMPSRoot = "/run/tangram/mps"

// checkSocketPaths measures the longest socket the MPS control daemon binds
// under the chart's default MPS root and under this check's own (its work
// directory, where the MPS checks make a directory of MkdirTemp's form): a
// Unix socket path over 107 bytes cannot be bound, and a real r615 node
// failed with a 117-character pipe directory (NVIDIA-FACTS.md, "Round
// two"). It only computes paths. The chart's default root must fit; a work
// directory too long for the check's own MPS daemon is noted, since the MPS
// checks then fail for that reason alone.
func (s *state) checkSocketPaths(_ context.Context, progress gpucheck.Progress) gpucheck.Outcome {
	if out, ok := s.needCards(); !ok {
		return out
	}
	roots := []struct{ what, root string }{
		{"the chart's default --mps-root", DefaultMPSRoot},
		// MkdirTemp's suffix is at most 10 digits.
		{"this check's MPS root (under its work directory)", filepath.Join(s.cfg.WorkDir, "mps-v3-0123456789")},
	}
	var lines, errs, notes []string
	for i, r := range roots {
		layout := daemon.Layout{Root: r.root}
		for _, server := range []string{"", mpsv3.DefaultServer} {
			mode := "classic control socket"
			if server != "" {
				mode = "MPS v3 namespace socket"
			}
			path := mps.LongestSocketPath(layout, server)
			lines = append(lines, fmt.Sprintf("%s %s: %s, %d of %d bytes", r.what, mode, path, len(path), control.MaxSocketPath))
			if err := mps.CheckSocketPaths(layout, server); err != nil {
				if i == 0 {
					errs = append(errs, err.Error())
				} else {
					notes = append(notes, fmt.Sprintf("%s would not fit under this check's work directory %s: give the check a shorter OUTDIR (e.g. under /tmp) or the MPS checks fail", mode, s.cfg.WorkDir))
				}
			}
		}
	}
	progress("%s", strings.Join(lines, "; "))
	switch {
	case len(errs) > 0:
		return gpucheck.Fail("%s (%s)", strings.Join(errs, "; "), strings.Join(lines, "; "))
	case len(notes) > 0:
		return gpucheck.Note("%s; %s", strings.Join(notes, "; "), strings.Join(lines, "; "))
	}
	return gpucheck.Pass("%s", strings.Join(lines, "; "))
}

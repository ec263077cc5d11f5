package gpu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"k8s.io/klog/v2"
)

// HealthEventKind says what a HealthEvent reports.
type HealthEventKind string

const (
	// HealthEventXID is an XID error reported by the driver for a card.
	HealthEventXID HealthEventKind = "xid"
	// HealthEventGPULost means the card stopped answering (fell off the bus).
	HealthEventGPULost HealthEventKind = "gpu-lost"
	// HealthEventRecovered means the card is known to be healthy again:
	// NVML reported that no recovery action is pending, or a lost card
	// answers again.
	HealthEventRecovered HealthEventKind = "recovered"
)

// HealthEvent is one thing a card reported about its health.
type HealthEvent struct {
	// Index is the card's NVML index (device gpu-<Index>).
	Index int             `json:"index"`
	Kind  HealthEventKind `json:"event"`
	// XID is the XID number of an HealthEventXID.
	XID uint64 `json:"xid,omitempty"`
	// Time is when the event happened; zero means when it was received.
	Time time.Time `json:"time,omitzero"`
	// Message is an optional detail for people (e.g. NVML's recovery action).
	Message string `json:"message,omitempty"`
	// GPUInstance and ComputeInstance are set when the event concerns one
	// MIG instance of the card (NVML's event data carries their IDs; it
	// says 0xFFFFFFFF for a card-wide event, which leaves them nil).
	GPUInstance     *int `json:"gpuInstance,omitempty"`
	ComputeInstance *int `json:"computeInstance,omitempty"`
}

// Validate reports what is wrong with an event read from outside.
func (e HealthEvent) Validate() error {
	if e.Index < 0 {
		return fmt.Errorf("index %d is negative", e.Index)
	}
	if (e.GPUInstance != nil && *e.GPUInstance < 0) || (e.ComputeInstance != nil && *e.ComputeInstance < 0) {
		return errors.New("a MIG instance ID is negative")
	}
	if e.GPUInstance == nil && e.ComputeInstance != nil {
		return errors.New(`"computeInstance" needs its "gpuInstance"`)
	}
	switch e.Kind {
	case HealthEventXID:
		if e.XID == 0 {
			return errors.New(`an "xid" event needs a non-zero "xid"`)
		}
	case HealthEventGPULost, HealthEventRecovered:
	default:
		return fmt.Errorf("unknown event %q: want %q, %q or %q", e.Kind, HealthEventXID, HealthEventGPULost, HealthEventRecovered)
	}
	return nil
}

// HealthWatcher is implemented by Sources that can report the cards' health.
type HealthWatcher interface {
	// WatchHealth sends health events until ctx ends, then returns nil. An
	// error means the cards' health cannot be watched (any more).
	WatchHealth(ctx context.Context, events chan<- HealthEvent) error
}

// FileHealthWatcher injects health events from a JSON-lines file, one
// HealthEvent per line, e.g. {"index":1,"event":"xid","xid":79}. It is how
// tests and demos make fake cards fail. Only lines appended after the watch
// started count, as with NVML's event sets. A malformed line is logged and
// skipped.
type FileHealthWatcher struct {
	Path string
	// PollInterval is how often the file is checked; 0 means 250ms.
	PollInterval time.Duration
}

// WatchHealth implements HealthWatcher.
func (w FileHealthWatcher) WatchHealth(ctx context.Context, events chan<- HealthEvent) error {
	logger := klog.FromContext(ctx).WithValues("file", w.Path)
	interval := w.PollInterval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	offset, err := fileSize(w.Path)
	if err != nil {
		return fmt.Errorf("watching health events in %s: %w", w.Path, err)
	}
	logger.Info("Reading injected GPU health events", "offset", offset)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		read, err := readEventLines(w.Path, offset, func(line []byte) {
			var ev HealthEvent
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ev); err != nil {
				logger.Error(err, "Skipping malformed health event line; want JSON like {\"index\":1,\"event\":\"xid\",\"xid\":79}", "line", string(line))
				return
			}
			if err := ev.Validate(); err != nil {
				logger.Error(err, "Skipping invalid health event", "line", string(line))
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
			}
		})
		if err != nil {
			logger.Error(err, "Reading health events; retrying")
			continue
		}
		if read < 0 {
			// The file was truncated or replaced: start again at its end.
			offset, _ = fileSize(w.Path)
			continue
		}
		offset += read
	}
}

// fileSize is the size of path, 0 when it does not exist yet.
func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// readEventLines calls fn for every complete line after offset and returns
// how many bytes it consumed; -1 when the file is now shorter than offset.
func readEventLines(path string, offset int64, fn func(line []byte)) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() < offset {
		return -1, nil
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, err
	}
	r := bufio.NewReader(f)
	var consumed int64
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			// EOF, or a line still being written: read it next time.
			return consumed, nil
		}
		consumed += int64(len(line))
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			fn(trimmed)
		}
	}
}

// AppendHealthEvent appends ev to a FileHealthWatcher's file in one write,
// so a watcher never sees half a line as complete.
func AppendHealthEvent(path string, ev HealthEvent) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("health event: %w", err)
	}
	line, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encoding health event: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening health events file: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing health event to %s: %w", path, err)
	}
	return f.Close()
}

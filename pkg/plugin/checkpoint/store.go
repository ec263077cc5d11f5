package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tangram-gpu/tangram/pkg/plugin/durable"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
)

// BootIDPath is where Linux publishes the random ID of the current boot.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

const checksumPrefix = "sha256:"

// envelope is the file layout; the checksum covers the exact bytes of Data.
type envelope struct {
	Version  string          `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Moved-aside checkpoints kept for diagnosis: at most DefaultMaxCorruptKept,
// none older than DefaultCorruptMaxAge (a crash-looping plugin with a
// corrupting disk must not fill it).
const (
	DefaultMaxCorruptKept = 5
	DefaultCorruptMaxAge  = 7 * 24 * time.Hour
	// movedAsideTimeFormat stamps moved-aside files; it sorts by time.
	movedAsideTimeFormat = "20060102T150405.000000000Z"
	movedAsideInfix      = ".corrupt-"
)

// Store loads and saves one checkpoint file. Save is safe for concurrent use.
type Store struct {
	path   string
	bootID func() (string, error)
	now    func() time.Time
	// maxCorruptKept and corruptMaxAge bound the moved-aside files.
	maxCorruptKept int
	corruptMaxAge  time.Duration

	mu sync.Mutex
	// sweptAt is when a Load last removed the stale temp files and pruned
	// the moved-aside ones. A Load (one per kubelet call, under the state
	// lock) skips the two directory scans within sweepInterval of it,
	// unless it moved a file aside: what a process that died mid-save
	// leaves stays that long at most.
	sweptAt time.Time
}

// sweepInterval is how often Load looks for stale temp files and
// moved-aside checkpoints past their limits.
const sweepInterval = time.Hour

// Option configures a Store.
type Option func(*Store)

// WithBootID replaces reading BootIDPath, for tests.
func WithBootID(f func() (string, error)) Option { return func(s *Store) { s.bootID = f } }

// WithClock replaces time.Now for the name and age of moved-aside files.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithCorruptRetention replaces how many moved-aside files are kept, and
// for how long.
func WithCorruptRetention(keep int, maxAge time.Duration) Option {
	return func(s *Store) { s.maxCorruptKept, s.corruptMaxAge = keep, maxAge }
}

// NewStore keeps the checkpoint at path, e.g.
// /var/lib/kubelet/plugins/gpu.tangram.dev/checkpoint.json.
func NewStore(path string, opts ...Option) *Store {
	s := &Store{path: path, bootID: onceBootID(ReadBootID), now: time.Now,
		maxCorruptKept: DefaultMaxCorruptKept, corruptMaxAge: DefaultCorruptMaxAge}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Path is the checkpoint file.
func (s *Store) Path() string { return s.path }

// onceBootID returns read's first boot ID from then on (a Store reads it
// once): a process never outlives its boot, and every Load and Save of a
// call asks for it. An
// error is not kept; the next call reads again.
func onceBootID(read func() (string, error)) func() (string, error) {
	var mu sync.Mutex
	var id string
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if id != "" {
			return id, nil
		}
		got, err := read()
		if err != nil {
			return "", err
		}
		id = got
		return id, nil
	}
}

// ReadBootID reads the current boot ID from BootIDPath.
func ReadBootID() (string, error) {
	raw, err := os.ReadFile(BootIDPath)
	if err != nil {
		return "", fmt.Errorf("reading boot ID: %w", err)
	}
	id := strings.TrimSpace(string(raw))
	if id == "" {
		return "", fmt.Errorf("reading boot ID: %s is empty", BootIDPath)
	}
	return id, nil
}

// CorruptError says why a checkpoint file could not be used and where it
// was moved.
type CorruptError struct {
	Path string
	// MovedTo is the file's new name; empty if moving it failed (MoveErr).
	MovedTo string
	MoveErr error
	// Err is what was wrong with the file.
	Err error
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("checkpoint %s is unusable: %v", e.Path, e.Err)
	if e.MovedTo != "" {
		return msg + "; moved to " + e.MovedTo + ", state will be rebuilt"
	}
	return fmt.Sprintf("%s; could not move it aside (%v), it will be overwritten", msg, e.MoveErr)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// DroppedClaim is a claim dropped from the checkpoint because the node
// rebooted since it was prepared.
type DroppedClaim struct {
	UID, Namespace, Name string
	State                prepared.State
}

// LoadResult is what Load found.
type LoadResult struct {
	// Checkpoint is never nil; empty when there was no usable file.
	Checkpoint *Checkpoint
	// Missing is set when there was no file at all: a first start, or a
	// restart after a corrupt file was moved aside and the state it held
	// was not yet rebuilt and saved.
	Missing bool
	// Corrupt is set when the file existed but could not be used.
	Corrupt *CorruptError
	// PreviousBootID is the boot ID in the file when it differs from now.
	PreviousBootID string
	// Dropped lists the claims dropped because of a reboot, sorted by UID.
	Dropped []DroppedClaim
	// RemovedCorrupt lists moved-aside files of earlier loads removed
	// because there were too many or they were too old.
	RemovedCorrupt []string
}

// Load reads the checkpoint. A missing file gives an empty checkpoint. Bad
// content never fails Load (see LoadResult.Corrupt); only failing to read
// the boot ID does, because without it state cannot be trusted. At most
// every sweepInterval, and after moving a file aside, it also removes the
// temp files of saves that never finished and the moved-aside files past
// their limits.
func (s *Store) Load() (*LoadResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sweep := s.sweptAt.IsZero() || s.now().Sub(s.sweptAt) >= sweepInterval
	if sweep {
		s.removeStaleTemps()
	}

	bootID, err := s.bootID()
	if err != nil {
		return nil, fmt.Errorf("loading checkpoint %s: %w", s.path, err)
	}
	res := &LoadResult{Checkpoint: New()}
	res.Checkpoint.BootID = bootID
	defer func() {
		if sweep || res.Corrupt != nil {
			res.RemovedCorrupt = s.pruneMovedAside()
			s.sweptAt = s.now()
		}
	}()

	raw, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		res.Missing = true
		return res, nil
	}
	var cp *Checkpoint
	if err == nil {
		cp, err = decode(raw)
	} else {
		err = fmt.Errorf("reading: %w", err)
	}
	if err != nil {
		res.Corrupt = s.moveAside(err)
		return res, nil
	}
	if cp.BootID != bootID {
		res.PreviousBootID = cp.BootID
		for uid, c := range cp.Claims {
			res.Dropped = append(res.Dropped, DroppedClaim{UID: uid, Namespace: c.Namespace, Name: c.Name, State: c.State})
		}
		sort.Slice(res.Dropped, func(i, j int) bool { return res.Dropped[i].UID < res.Dropped[j].UID })
		return res, nil
	}
	res.Checkpoint = cp
	return res, nil
}

func decode(raw []byte) (*Checkpoint, error) {
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("not a checkpoint file: %w", err)
	}
	if env.Version != Version {
		return nil, fmt.Errorf("unsupported version %q (this plugin reads %q)", env.Version, Version)
	}
	if want := checksum(env.Data); env.Checksum != want {
		return nil, fmt.Errorf("checksum mismatch: file says %q, content has %q", env.Checksum, want)
	}
	cp := New()
	if err := json.Unmarshal(env.Data, cp); err != nil {
		return nil, fmt.Errorf("decoding claims: %w", err)
	}
	if cp.Claims == nil {
		cp.Claims = map[string]prepared.Claim{}
	}
	for uid, c := range cp.Claims {
		if c.State != prepared.PrepareStarted && c.State != prepared.PrepareCompleted {
			return nil, fmt.Errorf("claim %s has unknown state %q", uid, c.State)
		}
		// The UID is the entry's key, not stored in the entry.
		c.UID = uid
		cp.Claims[uid] = c
	}
	return cp, nil
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return checksumPrefix + hex.EncodeToString(sum[:])
}

func (s *Store) moveAside(cause error) *CorruptError {
	ce := &CorruptError{Path: s.path, Err: cause}
	target := s.path + movedAsideInfix + s.now().UTC().Format(movedAsideTimeFormat)
	if err := os.Rename(s.path, target); err != nil {
		ce.MoveErr = err
		return ce
	}
	ce.MovedTo = target
	_ = syncDir(filepath.Dir(s.path))
	return ce
}

// Save atomically and durably replaces the checkpoint file with cp, stamped
// with the current boot ID. cp is only read; callers must not change it
// concurrently.
func (s *Store) Save(cp *Checkpoint) error { return s.save(cp, writeAtomic) }

// SaveUnsynced replaces the checkpoint file like Save, atomically, but
// without fsync (durable.ReplaceFile): the next process reads it (after a
// crash of this one, or the other plugin pod of a rolling update), a power
// loss may lose it or leave an empty file (which Load reports as corrupt).
// A power loss is a reboot, after which the boot ID drops every record, so
// this is for a state whose only reader is a later process of this boot (a
// claim's PrepareStarted), followed by a Save.
func (s *Store) SaveUnsynced(cp *Checkpoint) error { return s.save(cp, durable.ReplaceFile) }

func (s *Store) save(cp *Checkpoint, write func(path string, data []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()

	bootID, err := s.bootID()
	if err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", s.path, err)
	}
	claims := cp.Claims
	if claims == nil {
		claims = map[string]prepared.Claim{}
	}
	data, err := json.Marshal(Checkpoint{BootID: bootID, Claims: claims})
	if err != nil {
		return fmt.Errorf("saving checkpoint %s: encoding: %w", s.path, err)
	}
	// Assembled by hand: json.Marshal would re-compact data, which costs
	// more than encoding it did.
	file := make([]byte, 0, len(data)+128)
	file = fmt.Appendf(file, `{"version":%q,"checksum":%q,"data":`, Version, checksum(data))
	file = append(file, data...)
	file = append(file, '}', '\n')
	if err := write(s.path, file); err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", s.path, err)
	}
	return nil
}

// tempInfix names the temporary files of writeAtomic, which a crash may leave.
const tempInfix = durable.TempInfix

// writeAtomic writes path durably: temp file, fsync, rename, fsync of the
// directory (durable.WriteFile).
func writeAtomic(path string, data []byte) error { return durable.WriteFile(path, data) }

func syncDir(dir string) error { return durable.SyncDir(dir) }

// pruneMovedAside removes moved-aside files beyond the newest
// maxCorruptKept and those older than corruptMaxAge, judged by the time in
// their name. Files whose name does not parse are not ours and stay.
func (s *Store) pruneMovedAside() []string {
	matches, _ := filepath.Glob(s.path + movedAsideInfix + "*")
	type moved struct {
		path string
		at   time.Time
	}
	var files []moved
	for _, m := range matches {
		at, err := time.Parse(movedAsideTimeFormat, strings.TrimPrefix(m, s.path+movedAsideInfix))
		if err == nil {
			files = append(files, moved{m, at})
		}
	}
	// Newest first.
	sort.Slice(files, func(i, j int) bool { return files[i].at.After(files[j].at) })
	var removed []string
	now := s.now()
	for i, f := range files {
		if i < s.maxCorruptKept && now.Sub(f.at) <= s.corruptMaxAge {
			continue
		}
		if err := os.Remove(f.path); err == nil {
			removed = append(removed, f.path)
		}
	}
	return removed
}

// removeStaleTemps deletes temporary files a crashed Save left behind.
func (s *Store) removeStaleTemps() {
	matches, _ := filepath.Glob(s.path + tempInfix + "*")
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

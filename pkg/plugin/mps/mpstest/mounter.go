package mpstest

import "sync"

// RecordingMounter is a daemon.ShmMounter that mounts nothing and records
// the bound each directory was given.
type RecordingMounter struct {
	mu sync.Mutex
	// Bounds is each mounted directory's size; read it once the calls
	// are done.
	Bounds map[string]int64
	// Fail, when set, fails every Mount.
	Fail error
}

// NewRecordingMounter returns a mounter with nothing mounted.
func NewRecordingMounter() *RecordingMounter {
	return &RecordingMounter{Bounds: map[string]int64{}}
}

func (r *RecordingMounter) Mount(dir string, size int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Fail != nil {
		return r.Fail
	}
	r.Bounds[dir] = size
	return nil
}

func (r *RecordingMounter) Mounted(dir string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.Bounds[dir]
	return ok, nil
}

func (r *RecordingMounter) Unmount(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.Bounds, dir)
	return nil
}

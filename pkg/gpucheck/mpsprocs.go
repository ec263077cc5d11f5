package gpucheck

import (
	"fmt"
	"sort"
	"strings"
)

// The MPS processes row: while two clients of a private classic daemon
// hold known amounts of memory, what do NVML's process lists say? It is
// there to learn whether per-client usage is visible on the driver
// (shared/notes/NVIDIA-FACTS.md, "Per-process usage"), so it records and
// notes; it fails only on NVML errors other than NOT_SUPPORTED and on a
// set-up that did not give it two served clients and a server.

// NVMLValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long
// long: the usedGpuMemory of a process whose usage NVML does not know.
const NVMLValueNotAvailable = ^uint64(0)

// NVMLProcess is one entry of an NVML process list (nvmlProcessInfo_t).
type NVMLProcess struct {
	PID uint32 `json:"pid"`
	// UsedBytes is usedGpuMemory as NVML gave it: NVMLValueNotAvailable
	// when not available.
	UsedBytes         uint64 `json:"usedGpuMemory"`
	GPUInstanceID     uint32 `json:"gpuInstanceId"`
	ComputeInstanceID uint32 `json:"computeInstanceId"`
	// Gone: no process of this PID was running when the list was read
	// back (it exited, or NVML lists a stale PID).
	Gone bool `json:"gone,omitempty"`
}

// ProcessList is one NVML call's answer.
type ProcessList struct {
	// Call is the NVML function, e.g. nvmlDeviceGetComputeRunningProcesses_v3.
	Call string `json:"call"`
	// Return is "SUCCESS" or the error's name.
	Return    string        `json:"return"`
	Processes []NVMLProcess `json:"processes"`
}

// MPSClient is one client the probe started and what it holds.
type MPSClient struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	// AllocatedMiB is what the client said it allocated (cuda-alloc).
	AllocatedMiB int64 `json:"allocatedMiB"`
	// Running: the client still held its context when NVML was asked.
	Running bool `json:"running"`
	// Log is the client's output, for a failure's detail.
	Log string `json:"log,omitempty"`
}

// MPSProcessReading is what the probe saw on one card.
type MPSProcessReading struct {
	Card    string      `json:"card"`
	Clients []MPSClient `json:"clients"`
	// ServerPIDs and ControlPIDs are the MPS server(s) and control daemon
	// the probe's session started (host PIDs).
	ServerPIDs  []int       `json:"serverPids"`
	ControlPIDs []int       `json:"controlPids"`
	Compute     ProcessList `json:"compute"`
	MPS         ProcessList `json:"mps"`
}

func usedString(b uint64) string {
	if b == NVMLValueNotAvailable {
		return "memory not available"
	}
	return mib(b)
}

// whoIs names a PID from the reading: a client, the server, the control
// daemon, or another process.
func (r MPSProcessReading) whoIs(pid uint32) string {
	for _, c := range r.Clients {
		if c.PID == int(pid) {
			return "client " + c.Name
		}
	}
	for _, p := range r.ServerPIDs {
		if p == int(pid) {
			return "MPS server"
		}
	}
	for _, p := range r.ControlPIDs {
		if p == int(pid) {
			return "MPS control daemon"
		}
	}
	return "another process"
}

// listing describes a list: each entry with who it is and its memory.
func (r MPSProcessReading) listing(l ProcessList) string {
	if l.Return != NVMLSuccess {
		return fmt.Sprintf("%s: %s", l.Call, l.Return)
	}
	if len(l.Processes) == 0 {
		return fmt.Sprintf("%s: no process", l.Call)
	}
	procs := append([]NVMLProcess(nil), l.Processes...)
	sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	parts := make([]string, len(procs))
	for i, p := range procs {
		parts[i] = fmt.Sprintf("pid %d (%s) %s", p.PID, r.whoIs(p.PID), usedString(p.UsedBytes))
		if p.GPUInstanceID != ^uint32(0) && p.GPUInstanceID != 0 || p.ComputeInstanceID != ^uint32(0) && p.ComputeInstanceID != 0 {
			parts[i] += fmt.Sprintf(" (GPU instance %d, compute instance %d)", p.GPUInstanceID, p.ComputeInstanceID)
		}
		if p.Gone {
			parts[i] += ", no longer running"
		}
	}
	return fmt.Sprintf("%s: %s", l.Call, strings.Join(parts, ", "))
}

func find(l ProcessList, pid int) (NVMLProcess, bool) {
	for _, p := range l.Processes {
		if int(p.PID) == pid {
			return p, true
		}
	}
	return NVMLProcess{}, false
}

// seenAs says how a list shows one PID.
func seenAs(l ProcessList, pid int) string {
	if l.Return != NVMLSuccess {
		return "not read"
	}
	p, ok := find(l, pid)
	if !ok {
		return "not listed"
	}
	return usedString(p.UsedBytes)
}

// perClient says whether a list shows each client's own memory: "yes"
// when every client is listed with a figure, "listed without memory"
// when listed but not available, "no" when a client is missing, "" when
// the list was not read.
func (r MPSProcessReading) perClient(l ProcessList) string {
	if l.Return != NVMLSuccess {
		return ""
	}
	listed, figures := 0, 0
	for _, c := range r.Clients {
		if p, ok := find(l, c.PID); ok {
			listed++
			if p.UsedBytes != NVMLValueNotAvailable {
				figures++
			}
		}
	}
	switch {
	case figures == len(r.Clients):
		return "yes, each client with a figure of its own"
	case listed == len(r.Clients) && figures == 0:
		return "listed, memory not available"
	case listed == len(r.Clients):
		return fmt.Sprintf("listed, %d of %d with a figure", figures, len(r.Clients))
	case listed == 0:
		return "no, no client listed"
	}
	return fmt.Sprintf("partly, %d of %d clients listed", listed, len(r.Clients))
}

func listErr(l ProcessList) string {
	if l.Return == NVMLSuccess || l.Return == NVMLNotSupported {
		return ""
	}
	if l.Return == "" {
		return fmt.Sprintf("%s was not called", l.Call)
	}
	return fmt.Sprintf("%s: %s", l.Call, l.Return)
}

// MPSProcessesOutcome records what NVML's two process lists showed of
// the clients and the server, and notes whether per-client usage is
// visible. It fails when a list answered an error other than
// NOT_SUPPORTED, when the set-up did not hold (fewer than two clients,
// a client that was not served or had exited before NVML was asked, no
// MPS server found); NVML's answers themselves never fail it.
func MPSProcessesOutcome(r MPSProcessReading) Outcome {
	var errs []string
	if len(r.Clients) < 2 {
		errs = append(errs, fmt.Sprintf("%d client(s) started, the reading needs two", len(r.Clients)))
	}
	var clients []string
	for _, c := range r.Clients {
		switch {
		case c.AllocatedMiB <= 0:
			errs = append(errs, fmt.Sprintf("client %s (pid %d) allocated nothing, so it was not served: %q", c.Name, c.PID, strings.TrimSpace(c.Log)))
		case !c.Running:
			errs = append(errs, fmt.Sprintf("client %s (pid %d) had exited before NVML was asked: %q", c.Name, c.PID, strings.TrimSpace(c.Log)))
		}
		clients = append(clients, fmt.Sprintf("client %s (pid %d, allocated %d MiB): compute list %s, MPS list %s",
			c.Name, c.PID, c.AllocatedMiB, seenAs(r.Compute, c.PID), seenAs(r.MPS, c.PID)))
	}
	if len(r.ServerPIDs) == 0 {
		errs = append(errs, "no MPS server process of the session was found while the clients ran")
	}
	for _, l := range []ProcessList{r.Compute, r.MPS} {
		if e := listErr(l); e != "" {
			errs = append(errs, e)
		}
	}
	var servers []string
	for _, pid := range r.ServerPIDs {
		servers = append(servers, fmt.Sprintf("MPS server (pid %d): compute list %s, MPS list %s", pid, seenAs(r.Compute, pid), seenAs(r.MPS, pid)))
	}
	var learned []string
	for _, l := range []ProcessList{r.Compute, r.MPS} {
		switch {
		case l.Return == NVMLNotSupported:
			learned = append(learned, fmt.Sprintf("%s is not supported", l.Call))
		case l.Return == NVMLSuccess:
			learned = append(learned, fmt.Sprintf("%s: per-client memory %s", l.Call, r.perClient(l)))
		}
	}
	var gone []string
	for _, l := range []ProcessList{r.Compute, r.MPS} {
		for _, p := range l.Processes {
			if p.Gone {
				gone = append(gone, fmt.Sprintf("pid %d (%s)", p.PID, l.Call))
			}
		}
	}
	if len(gone) > 0 {
		learned = append(learned, "listed but no longer running when read back: "+strings.Join(gone, ", "))
	}
	detail := strings.Join(append(append(append(learned, clients...), servers...), r.listing(r.Compute), r.listing(r.MPS)), "; ")
	if r.Card != "" {
		detail = fmt.Sprintf("card %s: %s", r.Card, detail)
	}
	if len(errs) > 0 {
		return Fail("%s; %s", strings.Join(errs, "; "), detail)
	}
	return Note("%s", detail)
}

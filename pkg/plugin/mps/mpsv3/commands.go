package mpsv3

// The MPS v3 control commands in their documented forms (NVIDIA, "MPS v3
// Interface"; docs/nvml.md has the list), built and their answers parsed
// here without I/O; only Namespaces.ctl runs them.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

func serverCreate(server string, uid int, devices []string) []string {
	return []string{"server", "create", server, fmt.Sprintf("--uid=%d", uid), "--allowed-devices=" + strings.Join(devices, ",")}
}

func serverList() []string { return []string{"server", "list", "--format=csv"} }

func namespaceCreate(server, name string) []string {
	return []string{"namespace", "create", name, "--server=" + server}
}

// namespaceSet sets what the spec names; nil when it names nothing.
func namespaceSet(server string, spec NamespaceSpec) []string {
	var opts []string
	if spec.ActiveThreadPercentage > 0 {
		opts = append(opts, fmt.Sprintf("--active-thread-percentage=%d", spec.ActiveThreadPercentage))
	}
	if spec.PinnedMemoryLimit != "" {
		opts = append(opts, "--pinned-memory-limit="+spec.PinnedMemoryLimit)
	}
	if len(opts) == 0 {
		return nil
	}
	return append([]string{"namespace", "set", spec.Name, "--server=" + server}, opts...)
}

func namespaceList(server string) []string {
	return []string{"namespace", "list", "--server=" + server, "--format=csv"}
}

// The spellings of a namespace's pipe directory field, the documented one
// first: NVIDIA's page spells pipe-directory, the r615 code of NVIDIA's
// GPU-fractioning project reads pipe_directory; which the binary takes is
// unconfirmed (NVIDIA-FACTS.md, "Round two").
var pipeDirectoryFields = []string{"pipe-directory", "pipe_directory"}

// namespaceGet reads one field of a namespace: `namespace get <ns>
// <server> <field>`, the server positional and the field required.
func namespaceGet(server, name, field string) []string {
	return []string{"namespace", "get", name, server, field}
}

// clientList lists a server's clients; the table form truncates PIDs,
// so CSV without a header (KAI, r615).
func clientList(server string) []string {
	return []string{"client", "list", "--server=" + server, "--format=csv,noheader"}
}

// clientTerminate ends one client: the PID alone, no options (it blocks
// until the client is gone, so it runs under the command deadline).
func clientTerminate(pid int) []string {
	return []string{"client", "terminate", strconv.Itoa(pid)}
}

func namespaceDelete(server, name string, force bool) []string {
	cmd := []string{"namespace", "delete", name, "--server=" + server}
	if force {
		cmd = append(cmd, "--force")
	}
	return cmd
}

// parseCSV reads a --format=csv answer: a header, then one row per entry,
// each a map from column name to value. Columns are found by name, with
// hyphens and underscores alike (NVIDIA's page spells pipe-directory, KAI
// reads pipe_directory: which the CSV uses is unconfirmed), so a driver
// that adds, reorders or respells columns is still read right. Keys are
// the hyphenated spelling.
func parseCSV(out string, required ...string) ([]map[string]string, error) {
	r := csv.NewReader(strings.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the MPS control daemon's CSV: no header line (got %q)", out)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the MPS control daemon's CSV header: %w", err)
	}
	for i := range header {
		header[i] = columnKey(header[i])
	}
	for _, col := range required {
		if !slices.Contains(header, columnKey(col)) {
			return nil, fmt.Errorf("the MPS control daemon's CSV has no %q column (header %q)", col, strings.Join(header, ","))
		}
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the MPS control daemon's CSV: %w", err)
		}
		if len(rec) < len(header) {
			return nil, fmt.Errorf("the MPS control daemon's CSV row %q has %d fields, the header %d", strings.Join(rec, ","), len(rec), len(header))
		}
		row := map[string]string{}
		for i, col := range header {
			row[col] = strings.TrimSpace(rec[i])
		}
		if len(rec) > len(header) {
			// A last column may hold commas (a device list) written
			// unquoted.
			row[header[len(header)-1]] = strings.Join(rec[len(header)-1:], ",")
		}
		rows = append(rows, row)
	}
}

// columnKey is a column's name in one spelling: lower case, hyphens.
func columnKey(col string) string {
	return strings.NewReplacer("_", "-", " ", "-").Replace(strings.ToLower(strings.TrimSpace(col)))
}

// ServerState is the node's server as "server list" shows it.
type ServerState struct {
	// Listed is false when the server is not in the list.
	Listed bool
	Status string
	PID    string
}

// Ready reports whether clients can use the server: status Ready (the
// documented status, any case), or the server's PID listed (its process
// runs: NVIDIA documents no other status word, so one we do not know must
// not hold every share back).
func (s ServerState) Ready() bool {
	if !s.Listed {
		return false
	}
	if strings.EqualFold(s.Status, "ready") {
		return true
	}
	pid, err := strconv.Atoi(s.PID)
	return err == nil && pid > 0
}

// serverState finds server in a "server list --format=csv" answer.
func serverState(out, server string) (ServerState, error) {
	rows, err := parseCSV(out, "name")
	if err != nil {
		return ServerState{}, err
	}
	for _, r := range rows {
		if r["name"] == server {
			return ServerState{Listed: true, Status: r["status"], PID: r["pid"]}, nil
		}
	}
	return ServerState{}, nil
}

// parseNamespaces reads a "namespace list --format=csv" answer into specs,
// by name, columns in either spelling.
func parseNamespaces(out string) (map[string]NamespaceSpec, error) {
	rows, err := parseCSV(out, "name")
	if err != nil {
		return nil, err
	}
	specs := map[string]NamespaceSpec{}
	for _, r := range rows {
		spec := NamespaceSpec{Name: r["name"], PinnedMemoryLimit: r["pinned-memory-limit"], PipeDirectory: r["pipe-directory"]}
		if _, err := ParseSize(spec.PinnedMemoryLimit); err != nil {
			return nil, fmt.Errorf("namespace %s: pinned-memory-limit: %w", spec.Name, err)
		}
		if spec.ActiveThreadPercentage, err = parsePercent(r["active-thread-percentage"]); err != nil {
			return nil, fmt.Errorf("namespace %s: active-thread-percentage %q is not a number", spec.Name, r["active-thread-percentage"])
		}
		specs[spec.Name] = spec
	}
	return specs, nil
}

// parseClientPIDs reads "client list --format=csv,noheader": the PIDs of
// the clients of namespace on server. A row is laid out as an r615 capture
// shows it (NVIDIA-FACTS.md, "Round two"):
//
//	<pid>,<server>,<device UUID>,<server>/<namespace> (<context id>),<command>
//
// A row belongs to the namespace when a field is "<server>/<namespace>",
// optionally followed by " (<context>)"; the PID is its first field. A
// header line (a daemon that ignores noheader) and rows whose first field
// is no PID are skipped; the command, the last field, may hold commas.
func parseClientPIDs(out, server, namespace string) ([]int, error) {
	r := csv.NewReader(strings.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading the MPS control daemon's client list: %w", err)
	}
	var pids []int
	for _, rec := range recs {
		pid, err := strconv.Atoi(strings.TrimSpace(rec[0]))
		if err != nil || pid <= 0 {
			continue
		}
		if slices.ContainsFunc(rec[1:], func(f string) bool { return isNamespaceField(f, server, namespace) }) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// isNamespaceField reports whether a client list field names the
// namespace: "<server>/<namespace>" or "<server>/<namespace> (<context>)".
func isNamespaceField(field, server, namespace string) bool {
	rest, ok := strings.CutPrefix(strings.TrimSpace(field), server+"/"+namespace)
	return ok && (rest == "" || strings.HasPrefix(rest, " ("))
}

package standin

// The MPS v3 commands (-p 3): servers, namespaces and their clients.

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// v3Invocation is a "<module> <verb> <positional...> --opt=value..." command.
type v3Invocation struct {
	names []string
	opts  map[string]string
	csv   bool
	// header is false for --format=csv,noheader.
	header bool
}

func parseV3Invocation(args []string) (v3Invocation, error) {
	inv := v3Invocation{opts: map[string]string{}, header: true}
	for _, a := range args {
		opt, ok := strings.CutPrefix(a, "--")
		if !ok {
			inv.names = append(inv.names, a)
			continue
		}
		k, v, hasValue := strings.Cut(opt, "=")
		if k == "" {
			return inv, fmt.Errorf("%q is not an option", a)
		}
		if !hasValue {
			v = "true" // a switch such as --force
		}
		inv.opts[k] = v
	}
	if f, ok := inv.opts["format"]; ok {
		delete(inv.opts, "format")
		switch f {
		case "csv":
			inv.csv = true
		case "csv,noheader", "noheader,csv":
			inv.csv, inv.header = true, false
		case "table":
		default:
			return inv, fmt.Errorf("--format=%s: want csv, csv,noheader or table", f)
		}
	}
	return inv, nil
}

// only fails when the invocation has options other than allowed.
func (inv v3Invocation) only(cmd string, allowed ...string) error {
	for _, k := range slices.Sorted(maps.Keys(inv.opts)) {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s: unknown option --%s", cmd, k)
		}
	}
	return nil
}

// column spells a multi-word column as the switch says.
func (d *daemonState) column(hyphenated string) string {
	if d.cfg.UnderscoreColumns {
		return strings.ReplaceAll(hyphenated, "-", "_")
	}
	return hyphenated
}

// executeV3 runs the MPS v3 "<module> <verb>" commands (NVIDIA, "MPS v3
// Interface", r615/r620), given as arguments. A server's and a namespace's
// pipe subdirectories (<pipe>/<server>/<namespace>/), through which a client
// reaches its namespace, are created and removed with them.
func (d *daemonState) executeV3(args []string) (string, bool, error) {
	if len(args) < 2 {
		return "", false, fmt.Errorf("usage: nvidia-cuda-mps-control [-p 3] <server|namespace|client> <verb> ... (got %q)", strings.Join(args, " "))
	}
	cmd := args[0] + " " + args[1]
	inv, err := parseV3Invocation(args[2:])
	if err != nil {
		return "", false, err
	}
	switch cmd {
	case "server create":
		return d.serverCreate(inv)
	case "server delete":
		return d.serverDelete(cmd, inv)
	case "server list":
		return d.serverList(cmd, inv)
	case "namespace create", "namespace set", "namespace delete":
		return d.namespaceChange(args[1], inv)
	case "namespace list":
		return d.namespaceList(cmd, inv)
	case "namespace get":
		return d.namespaceGet(inv)
	case "client list":
		return d.clientList(cmd, inv)
	case "client terminate":
		return d.clientTerminate(cmd, inv)
	case "standin attach-client":
		return d.attachClient(inv)
	}
	return "", false, fmt.Errorf("unknown command %q", cmd)
}

// serverDelete is `server delete <name>`; the server must have no
// namespace left.
func (d *daemonState) serverDelete(cmd string, inv v3Invocation) (string, bool, error) {
	if err := inv.only(cmd); err != nil {
		return "", false, err
	}
	if len(inv.names) != 1 {
		return "", false, errors.New("usage: server delete <name>")
	}
	s, ok := d.v3Servers[inv.names[0]]
	if !ok {
		return "", false, fmt.Errorf("no server %s", inv.names[0])
	}
	if len(s.namespaces) > 0 {
		return "", false, fmt.Errorf("server %s still has namespace %s", s.name, slices.Sorted(maps.Keys(s.namespaces))[0])
	}
	delete(d.v3Servers, s.name)
	d.rmPipeSubdir(s.name)
	return "", false, nil
}

// serverList is `server list`: the servers, as a table.
func (d *daemonState) serverList(cmd string, inv v3Invocation) (string, bool, error) {
	if err := inv.only(cmd); err != nil {
		return "", false, err
	}
	// rule: server-ready, server-list-columns.
	header := []string{"name", "uid", "pid", "status", d.column("pipe-directory"), d.column("allowed-devices")}
	var rows [][]string
	for _, name := range slices.Sorted(maps.Keys(d.v3Servers)) {
		s := d.v3Servers[name]
		rows = append(rows, []string{s.name, strconv.Itoa(s.uid), strconv.Itoa(s.pid), "Ready", filepath.Join(d.cfg.PipeDir, s.name), s.devices})
	}
	return renderTable(inv, header, rows), false, nil
}

// namespaceList is `namespace list [--server=<server>]`: the namespaces,
// as a table.
func (d *daemonState) namespaceList(cmd string, inv v3Invocation) (string, bool, error) {
	if err := inv.only(cmd, "server"); err != nil {
		return "", false, err
	}
	var rows [][]string
	for _, sname := range slices.Sorted(maps.Keys(d.v3Servers)) {
		if s := inv.opts["server"]; s != "" && s != sname {
			continue
		}
		s := d.v3Servers[sname]
		for _, name := range slices.Sorted(maps.Keys(s.namespaces)) {
			rows = append(rows, d.namespaceRow(s, name))
		}
	}
	if s := inv.opts["server"]; s != "" && d.v3Servers[s] == nil {
		return "", false, fmt.Errorf("no server %s", s)
	}
	return renderTable(inv, d.namespaceColumns(), rows), false, nil
}

// clientList is `client list [--server=<server>] [--namespace=<name>]`:
// the attached clients, each row as an r615 capture lays it out
// (NVIDIA-FACTS.md, "Round two"):
//
//	<pid>,<server>,<device UUID>,<server>/<namespace> (<context id>),<command>
//
// The header of the table form is not documented; the stand-in names the
// columns pid, server, device, namespace, command.
func (d *daemonState) clientList(cmd string, inv v3Invocation) (string, bool, error) {
	if err := inv.only(cmd, "server", "namespace"); err != nil {
		return "", false, err
	}
	// rule: client-list.
	var rows [][]string
	for _, sname := range slices.Sorted(maps.Keys(d.v3Servers)) {
		s := d.v3Servers[sname]
		if f := inv.opts["server"]; f != "" && f != sname {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(s.namespaces)) {
			if f := inv.opts["namespace"]; f != "" && f != name {
				continue
			}
			clients := s.namespaces[name].clients
			for _, pid := range slices.Sorted(maps.Keys(clients)) {
				c := clients[pid]
				rows = append(rows, []string{strconv.Itoa(pid), sname, c.device, sname + "/" + name + " (0)", c.command})
			}
		}
	}
	return renderTable(inv, []string{"pid", "server", "device", "namespace", "command"}, rows), false, nil
}

// clientTerminate is `client terminate <pid>`: the PID alone, no option
// (rule: client-terminate-pid); the client is detached from its
// namespace. The real command blocks until the client is gone; the
// stand-in's clients go at once.
func (d *daemonState) clientTerminate(cmd string, inv v3Invocation) (string, bool, error) {
	if err := inv.only(cmd); err != nil {
		return "", false, fmt.Errorf("%w (usage: client terminate <pid>)", err)
	}
	if len(inv.names) != 1 {
		return "", false, errors.New("usage: client terminate <pid>")
	}
	pid, err := strconv.Atoi(inv.names[0])
	if err != nil {
		return "", false, fmt.Errorf("%q is not a PID", inv.names[0])
	}
	for _, s := range d.v3Servers {
		for _, ns := range s.namespaces {
			if _, ok := ns.clients[pid]; ok {
				delete(ns.clients, pid)
				return "", false, nil
			}
		}
	}
	return "", false, fmt.Errorf("no client with PID %d", pid)
}

func (d *daemonState) serverCreate(inv v3Invocation) (string, bool, error) {
	if err := inv.only("server create", "uid", "allowed-devices"); err != nil {
		return "", false, err
	}
	if len(inv.names) > 1 {
		return "", false, errors.New("usage: server create [<name>] [--uid=<uid>] [--allowed-devices=<uuid>,...]")
	}
	name := "default"
	if len(inv.names) == 1 {
		name = inv.names[0]
	}
	if _, ok := d.v3Servers[name]; ok {
		return "", false, fmt.Errorf("server %s exists", name)
	}
	uid := os.Getuid()
	if v, ok := inv.opts["uid"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", false, fmt.Errorf("--uid=%s is not a UID", v)
		}
		uid = n
	}
	if d.cfg.MultiUser && uid != 0 {
		// rule: multiuser-uid0.
		return "", false, fmt.Errorf("--uid=%d: the servers of a multi-user daemon run as UID 0", uid)
	}
	if err := d.mkPipeSubdir(name); err != nil {
		return "", false, err
	}
	d.nextPID++
	d.v3Servers[name] = &v3Server{name: name, uid: uid, devices: inv.opts["allowed-devices"], pid: 300000 + d.nextPID,
		namespaces: map[string]*v3Namespace{}}
	return "", false, nil
}

// namespaceTarget finds the server and name of a namespace command:
// "<ns> --server=<server>".
func (d *daemonState) namespaceTarget(verb string, inv v3Invocation) (*v3Server, string, error) {
	if len(inv.names) != 1 || inv.opts["server"] == "" {
		return nil, "", fmt.Errorf("usage: namespace %s <name> --server=<server> [--<setting>=<value>...]", verb)
	}
	name := inv.names[0]
	if !standInNamespaceNameForm.MatchString(name) {
		// rule: ns-name.
		return nil, "", fmt.Errorf("invalid namespace name %q: lowercase letters, digits and underscores only, 1 to 64 characters", name)
	}
	s, ok := d.v3Servers[inv.opts["server"]]
	if !ok {
		return nil, "", fmt.Errorf("no server %s", inv.opts["server"])
	}
	return s, name, nil
}

func (d *daemonState) namespaceChange(verb string, inv v3Invocation) (string, bool, error) {
	s, name, err := d.namespaceTarget(verb, inv)
	if err != nil {
		return "", false, err
	}
	ns, exists := s.namespaces[name]
	switch verb {
	case "create":
		if err := inv.only("namespace create", "server", "active-thread-percentage", "pinned-memory-limit", "client-priority"); err != nil {
			return "", false, err
		}
		if exists {
			return "", false, fmt.Errorf("namespace %s exists on server %s", name, s.name)
		}
		ns = &v3Namespace{clients: map[int]v3Client{}}
		if err := ns.apply(inv.opts); err != nil {
			return "", false, err
		}
		// rule: socket-path.
		if socket := filepath.Join(d.cfg.PipeDir, s.name, name, "control"); len(socket) > maxSocketPath {
			return "", false, fmt.Errorf("namespace %s: its endpoint %s is %d bytes, over the %d a Unix socket path may have: bind failed (File name too long)", name, socket, len(socket), maxSocketPath)
		}
		if err := d.mkPipeSubdir(s.name, name); err != nil {
			return "", false, err
		}
		s.namespaces[name] = ns
		return "", false, nil
	case "set":
		if err := inv.only("namespace set", "server", "active-thread-percentage", "pinned-memory-limit", "client-priority"); err != nil {
			return "", false, err
		}
		if !exists {
			return "", false, fmt.Errorf("no namespace %s on server %s", name, s.name)
		}
		if len(ns.clients) > 0 {
			// rule: set-with-clients.
			return "", false, fmt.Errorf("namespace %s has %d attached client(s) (PIDs %v): its settings cannot change while clients are attached", name, len(ns.clients), slices.Sorted(maps.Keys(ns.clients)))
		}
		next := *ns
		if err := next.apply(inv.opts); err != nil {
			return "", false, err
		}
		*ns = next
		return "", false, nil
	default: // delete
		if err := inv.only("namespace delete", "server", "force"); err != nil {
			return "", false, err
		}
		if !exists {
			return "", false, fmt.Errorf("no namespace %s on server %s", name, s.name)
		}
		if len(ns.clients) > 0 && inv.opts["force"] != "true" {
			// rule: delete-with-clients.
			return "", false, fmt.Errorf("namespace %s has %d attached client(s) (PIDs %v): terminate them (client terminate) or delete with --force", name, len(ns.clients), slices.Sorted(maps.Keys(ns.clients)))
		}
		delete(s.namespaces, name)
		d.rmPipeSubdir(s.name, name)
		return "", false, nil
	}
}

// apply validates and sets namespace settings.
func (ns *v3Namespace) apply(opts map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		v := opts[k]
		switch k {
		case "active-thread-percentage":
			p, err := percentage(v)
			if err != nil {
				return err
			}
			ns.atp = p
		case "pinned-memory-limit":
			m := v3SizeForm.FindStringSubmatch(v)
			if m == nil {
				// rule: v3-size-unit.
				return fmt.Errorf("%q is not a memory size with a unit (e.g. 20G, 512M)", v)
			}
			n, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not a memory size: %w", v, err)
			}
			ns.pinnedBytes = n << (10 * (strings.Index("KMGT", m[2]) + 1))
		case "client-priority":
			ns.priority = v
		}
	}
	return nil
}

func (d *daemonState) namespaceColumns() []string {
	return []string{"name", "server", d.column("active-thread-percentage"), d.column("pinned-memory-limit"), d.column("client-priority"), d.column("pipe-directory")}
}

// namespaceRow renders a namespace as documented: percentages with two
// decimals ("30.00"), sizes in the largest unit that holds them exactly
// ("20G", "1536M"); unset values as "100.00" (no cap) and "unlimited"
// (rule: ns-list-unset).
func (d *daemonState) namespaceRow(s *v3Server, name string) []string {
	ns := s.namespaces[name]
	atp := ns.atp
	if atp == 0 {
		atp = 100
	}
	pinned := "unlimited"
	if ns.pinnedBytes > 0 {
		pinned = FormatSize(ns.pinnedBytes)
	}
	return []string{name, s.name, fmt.Sprintf("%.2f", atp), pinned, ns.priority, filepath.Join(d.cfg.PipeDir, s.name, name)}
}

// FormatSize writes bytes in the largest binary unit that holds them
// exactly, the form the stand-in lists (20 GiB is "20G"); bytes that are
// no whole number of KiB are written bare.
func FormatSize(b int64) string {
	for i, unit := range []string{"T", "G", "M", "K"} {
		shift := uint(10 * (4 - i))
		if b >= 1<<shift && b%(1<<shift) == 0 {
			return strconv.FormatInt(b>>shift, 10) + unit
		}
	}
	return strconv.FormatInt(b, 10)
}

// namespaceGet answers `namespace get <ns> <server> <field>`: the server
// positional and the field required (rule: ns-get-form). The page spells
// the field pipe-directory, the r615 code reads pipe_directory; which the
// binary takes is unconfirmed, so the stand-in takes the spelling the CSV
// switch names and refuses the other (rule: ns-get-pipe).
func (d *daemonState) namespaceGet(inv v3Invocation) (string, bool, error) {
	if err := inv.only("namespace get"); err != nil {
		return "", false, fmt.Errorf("%w (usage: namespace get <name> <server> <field>)", err)
	}
	if len(inv.names) != 3 {
		return "", false, errors.New("usage: namespace get <name> <server> <field>")
	}
	name, server, field := inv.names[0], inv.names[1], inv.names[2]
	inv.names, inv.opts["server"] = []string{name}, server
	s, name, err := d.namespaceTarget("get", inv)
	if err != nil {
		return "", false, err
	}
	if _, ok := s.namespaces[name]; !ok {
		return "", false, fmt.Errorf("no namespace %s on server %s", name, s.name)
	}
	row := d.namespaceRow(s, name)
	for i, col := range d.namespaceColumns() {
		if col == field {
			return row[i] + "\n", false, nil
		}
	}
	return "", false, fmt.Errorf("namespace get: unknown field %q (fields: %s)", field, strings.Join(d.namespaceColumns(), ", "))
}

// attachClient is the stand-in's own `standin attach-client <ns>
// --server=<s> [--pid=<pid>] [--device=<uuid>] [--command=<command>]`: a
// client attached to the namespace, on the server's first device unless
// named.
func (d *daemonState) attachClient(inv v3Invocation) (string, bool, error) {
	if err := inv.only("standin attach-client", "server", "pid", "device", "command"); err != nil {
		return "", false, err
	}
	s, name, err := d.namespaceTarget("attach-client", inv)
	if err != nil {
		return "", false, err
	}
	ns, ok := s.namespaces[name]
	if !ok {
		return "", false, fmt.Errorf("no namespace %s on server %s", name, s.name)
	}
	d.nextPID++
	pid := 400000 + d.nextPID
	if v, ok := inv.opts["pid"]; ok {
		if pid, err = strconv.Atoi(v); err != nil || pid <= 0 {
			return "", false, fmt.Errorf("--pid=%s is not a PID", v)
		}
	}
	c := v3Client{device: inv.opts["device"], command: inv.opts["command"]}
	if c.device == "" {
		c.device, _, _ = strings.Cut(s.devices, ",")
	}
	if c.command == "" {
		c.command = "standin-client"
	}
	ns.clients[pid] = c
	return strconv.Itoa(pid) + "\n", false, nil
}

// renderTable writes rows as CSV (quoted where a value holds a comma) or
// as the table form, whose header is upper case with spaces.
func renderTable(inv v3Invocation, header []string, rows [][]string) string {
	var b bytes.Buffer
	if inv.csv {
		w := csv.NewWriter(&b)
		if inv.header {
			_ = w.Write(header)
		}
		_ = w.WriteAll(rows)
		return b.String()
	}
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	upper := make([]string, len(header))
	for i, h := range header {
		upper[i] = strings.ToUpper(strings.NewReplacer("-", " ", "_", " ").Replace(h))
	}
	fmt.Fprintln(w, strings.Join(upper, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
	return b.String()
}

package standin

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
)

// The stand-in daemon's state and commands. Each rule the real tool is
// documented to enforce is marked "rule:"; TestStandInRules has each with
// its source.

type standInServer struct {
	uid    int
	atp    string
	pinned map[string]string
}

// v3Server is an MPS v3 server: a name, a UID, devices, namespaces.
type v3Server struct {
	name       string
	uid        int
	devices    string
	pid        int
	namespaces map[string]*v3Namespace
}

type v3Namespace struct {
	// atp is the active-thread percentage, 0 for none set.
	atp float64
	// pinnedBytes is the pinned-memory limit, 0 for none set.
	pinnedBytes int64
	priority    string
	// clients are the PIDs of the attached clients.
	clients map[int]bool
}

// standInState is the daemon's state; mu guards it.
type standInState struct {
	cfg   Config
	logMu sync.Mutex

	mu            sync.Mutex
	defaultATP    float64
	defaultPinned map[string]string
	servers       map[int]*standInServer
	nextPID       int
	v3Servers     map[string]*v3Server
	// classic is the MPS server the daemon started for classic clients;
	// nil until the first. clientLeft is closed and replaced whenever a
	// classic client leaves, waking the queued ones.
	classic    *classicServer
	clientLeft chan struct{}
}

// classicServer is the MPS server of a classic (protocol 2) daemon: it
// runs as the UID of the client it was started for and counts its
// connected clients.
type classicServer struct {
	pid, uid, clients int
}

func newStandInState(cfg Config) *standInState {
	return &standInState{cfg: cfg, defaultATP: 100, defaultPinned: map[string]string{},
		servers: map[int]*standInServer{}, v3Servers: map[string]*v3Server{}, clientLeft: make(chan struct{})}
}

var (
	pinnedLimitForm = regexp.MustCompile(`^[0-9]+[KMGT]?$`)
	// rule: v3-size-unit. A v3 size names its unit.
	v3SizeForm = regexp.MustCompile(`^([0-9]+)([KMGT])$`)
	// rule: ns-name.
	standInNamespaceNameForm = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

func percentage(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p <= 0 || p > 100 {
		return 0, fmt.Errorf("%q is not a percentage in (0, 100]", s)
	}
	return p, nil
}

func (d *standInState) server(pid string) (*standInServer, error) {
	n, err := strconv.Atoi(pid)
	if err == nil {
		if s, ok := d.servers[n]; ok {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no MPS server with PID %s", pid)
}

// execute runs one command: the reply, whether the daemon quits, or an
// error (a wrong command or argument, or one the protocol refuses).
func (d *standInState) execute(req standInRequest) (string, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.Transport == transportFlag {
		if slices.Equal(req.Args, []string{"quit"}) {
			return "", true, nil
		}
		return "", false, fmt.Errorf("unknown option %q", strings.Join(req.Args, " "))
	}
	switch d.cfg.Protocol {
	case 3:
		if req.Transport != transportArgv {
			// rule: v3-no-stdin.
			return "", false, errors.New("MPS v3 (protocol 3) has no interactive shell: give the command as arguments, nvidia-cuda-mps-control <module> <verb> ...; quit is -q")
		}
		return d.executeV3(req.Args)
	default:
		if req.Transport != transportStdin {
			// rule: v2-stdin.
			return "", false, fmt.Errorf("unknown option %q: legacy MPS (protocol 2) reads its commands on standard input; <module> <verb> arguments need a daemon started with -p 3", req.Args[0])
		}
		return d.executeLegacy(req.Args)
	}
}

// executeLegacy runs the legacy (protocol 2) commands of NVIDIA's MPS
// documentation, one line of the interactive shell each.
func (d *standInState) executeLegacy(f []string) (string, bool, error) {
	args := f[1:]
	want := func(n int, usage string) error {
		if len(args) != n {
			return fmt.Errorf("usage: %s", usage)
		}
		return nil
	}
	switch f[0] {
	case "quit":
		if len(args) != 0 && (len(args) != 2 || args[0] != "-t") {
			return "", false, errors.New("usage: quit [-t <timeout>]")
		}
		return "", true, nil
	case "get_server_list":
		var b strings.Builder
		pids := slices.Collect(maps.Keys(d.servers))
		if d.classic != nil {
			pids = append(pids, d.classic.pid)
		}
		slices.Sort(pids)
		for _, pid := range pids {
			fmt.Fprintf(&b, "%d\n", pid)
		}
		return b.String(), false, nil
	case "start_server":
		if len(args) != 2 || args[0] != "-uid" {
			return "", false, errors.New("usage: start_server -uid <uid>")
		}
		uid, err := strconv.Atoi(args[1])
		if err != nil || uid < 0 {
			return "", false, fmt.Errorf("%q is not a UID", args[1])
		}
		d.nextPID++
		d.servers[100000+d.nextPID] = &standInServer{uid: uid, pinned: map[string]string{}}
		return "", false, nil
	case "shutdown_server":
		if len(args) < 1 || len(args) > 2 || (len(args) == 2 && args[1] != "-f") {
			return "", false, errors.New("usage: shutdown_server <pid> [-f]")
		}
		if _, err := d.server(args[0]); err != nil {
			return "", false, err
		}
		pid, _ := strconv.Atoi(args[0])
		delete(d.servers, pid)
		return "", false, nil
	case "get_client_list":
		if err := want(1, "get_client_list <pid>"); err != nil {
			return "", false, err
		}
		_, err := d.server(args[0])
		return "", false, err
	case "set_default_active_thread_percentage":
		if err := want(1, "set_default_active_thread_percentage <percentage>"); err != nil {
			return "", false, err
		}
		p, err := percentage(args[0])
		if err != nil {
			return "", false, err
		}
		d.defaultATP = p
		return fmt.Sprintf("%.1f\n", p), false, nil
	case "get_default_active_thread_percentage":
		return fmt.Sprintf("%.1f\n", d.defaultATP), false, nil
	case "set_active_thread_percentage":
		if err := want(2, "set_active_thread_percentage <pid> <percentage>"); err != nil {
			return "", false, err
		}
		s, err := d.server(args[0])
		if err != nil {
			return "", false, err
		}
		if _, err := percentage(args[1]); err != nil {
			return "", false, err
		}
		s.atp = args[1]
		return "", false, nil
	case "set_default_device_pinned_mem_limit":
		if err := want(2, "set_default_device_pinned_mem_limit <device> <limit, e.g. 2G>"); err != nil {
			return "", false, err
		}
		if !pinnedLimitForm.MatchString(args[1]) {
			return "", false, fmt.Errorf("%q is not a memory limit (e.g. 2G, 512M)", args[1])
		}
		d.defaultPinned[args[0]] = args[1]
		return "", false, nil
	case "get_default_device_pinned_mem_limit":
		if err := want(1, "get_default_device_pinned_mem_limit <device>"); err != nil {
			return "", false, err
		}
		if v, ok := d.defaultPinned[args[0]]; ok {
			return v + "\n", false, nil
		}
		return "0\n", false, nil
	case "set_device_pinned_mem_limit":
		if err := want(3, "set_device_pinned_mem_limit <pid> <device> <limit>"); err != nil {
			return "", false, err
		}
		s, err := d.server(args[0])
		if err != nil {
			return "", false, err
		}
		if !pinnedLimitForm.MatchString(args[2]) {
			return "", false, fmt.Errorf("%q is not a memory limit (e.g. 2G, 512M)", args[2])
		}
		s.pinned[args[1]] = args[2]
		return "", false, nil
	}
	return "", false, fmt.Errorf("unknown command %q", f[0])
}

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
func (d *standInState) column(hyphenated string) string {
	if d.cfg.UnderscoreColumns {
		return strings.ReplaceAll(hyphenated, "-", "_")
	}
	return hyphenated
}

// executeV3 runs the MPS v3 "<module> <verb>" commands (NVIDIA, "MPS v3
// Interface", r615/r620), given as arguments. A server's and a namespace's
// pipe subdirectories (<pipe>/<server>/<namespace>/), through which a client
// reaches its namespace, are created and removed with them.
func (d *standInState) executeV3(args []string) (string, bool, error) {
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
	case "server list":
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
	case "namespace create", "namespace set", "namespace delete":
		return d.namespaceChange(args[1], inv)
	case "namespace list":
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
	case "namespace get":
		return d.namespaceGet(inv)
	case "client list":
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
				for _, pid := range slices.Sorted(maps.Keys(s.namespaces[name].clients)) {
					rows = append(rows, []string{strconv.Itoa(pid), sname, name})
				}
			}
		}
		return renderTable(inv, []string{"pid", "server", "namespace"}, rows), false, nil
	case "client terminate":
		if err := inv.only(cmd, "server"); err != nil {
			return "", false, err
		}
		if len(inv.names) != 1 {
			return "", false, errors.New("usage: client terminate <pid> [--server=<server>]")
		}
		pid, err := strconv.Atoi(inv.names[0])
		if err != nil {
			return "", false, fmt.Errorf("%q is not a PID", inv.names[0])
		}
		for _, s := range d.v3Servers {
			if f := inv.opts["server"]; f != "" && f != s.name {
				continue
			}
			for _, ns := range s.namespaces {
				if ns.clients[pid] {
					delete(ns.clients, pid)
					return "", false, nil
				}
			}
		}
		return "", false, fmt.Errorf("no client with PID %d", pid)
	case "standin attach-client":
		return d.attachClient(inv)
	}
	return "", false, fmt.Errorf("unknown command %q", cmd)
}

func (d *standInState) serverCreate(inv v3Invocation) (string, bool, error) {
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
func (d *standInState) namespaceTarget(verb string, inv v3Invocation) (*v3Server, string, error) {
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

func (d *standInState) namespaceChange(verb string, inv v3Invocation) (string, bool, error) {
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
		ns = &v3Namespace{clients: map[int]bool{}}
		if err := ns.apply(inv.opts); err != nil {
			return "", false, err
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

func (d *standInState) namespaceColumns() []string {
	return []string{"name", "server", d.column("active-thread-percentage"), d.column("pinned-memory-limit"), d.column("client-priority"), d.column("pipe-directory")}
}

// namespaceRow renders a namespace as documented: percentages with two
// decimals ("30.00"), sizes in the largest unit that holds them exactly
// ("20G", "1536M"); unset values as "100.00" (no cap) and "none".
func (d *standInState) namespaceRow(s *v3Server, name string) []string {
	ns := s.namespaces[name]
	atp := ns.atp
	if atp == 0 {
		atp = 100
	}
	pinned := "none"
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

// namespaceGet answers "namespace get <ns> <server> [<field>]" (KAI's
// form, server positional) and "namespace get <ns> --server=<s> [<field>]".
func (d *standInState) namespaceGet(inv v3Invocation) (string, bool, error) {
	if err := inv.only("namespace get", "server"); err != nil {
		return "", false, err
	}
	names := inv.names
	if inv.opts["server"] == "" && len(names) >= 2 {
		inv.opts["server"], names = names[1], append([]string{names[0]}, names[2:]...)
	}
	if len(names) < 1 || len(names) > 2 {
		return "", false, errors.New("usage: namespace get <name> <server> [<field>] or namespace get <name> --server=<server> [<field>]")
	}
	inv.names = names[:1]
	s, name, err := d.namespaceTarget("get", inv)
	if err != nil {
		return "", false, err
	}
	if _, ok := s.namespaces[name]; !ok {
		return "", false, fmt.Errorf("no namespace %s on server %s", name, s.name)
	}
	row := d.namespaceRow(s, name)
	if len(names) == 1 {
		return renderTable(inv, d.namespaceColumns(), [][]string{row}), false, nil
	}
	// rule: ns-get-pipe.
	field := strings.ReplaceAll(names[1], "_", "-")
	for i, col := range d.namespaceColumns() {
		if strings.ReplaceAll(col, "_", "-") == field {
			return row[i] + "\n", false, nil
		}
	}
	return "", false, fmt.Errorf("namespace get: unknown field %q", names[1])
}

func (d *standInState) attachClient(inv v3Invocation) (string, bool, error) {
	if err := inv.only("standin attach-client", "server", "pid"); err != nil {
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
	ns.clients[pid] = true
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

// mkPipeSubdir creates <pipe>/<parts...>, where the real daemon puts the
// sockets of a server or namespace.
func (d *standInState) mkPipeSubdir(parts ...string) error {
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00") {
			return fmt.Errorf("%q is not a valid name", p)
		}
	}
	dir := filepath.Join(append([]string{d.cfg.PipeDir}, parts...)...)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return nil
}

func (d *standInState) rmPipeSubdir(parts ...string) {
	_ = os.RemoveAll(filepath.Join(append([]string{d.cfg.PipeDir}, parts...)...))
}

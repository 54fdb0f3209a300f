package main

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The formats of ctl status.
const (
	formatTabular = "tabular"
	formatJSON    = "json"
	formatYAML    = "yaml"
	// formatLine is one line a unit, for grep and awk.
	formatLine = "line"
)

// statusSchemaVersion is the version of the status document's shape.
const statusSchemaVersion = 1

// renderStatus writes the model's status in a format, without colour.
func renderStatus(w io.Writer, st *pb.ModelStatus, format string) error {
	return renderStatusWith(w, st, format, statusLook{})
}

// statusLook is how the tabular status looks on a terminal: coloured,
// its lines cut to the terminal's width (0: not cut).
type statusLook struct {
	color bool
	width int
}

// renderStatusWith writes the model's status in a format, looking as
// look says when tabular.
func renderStatusWith(w io.Writer, st *pb.ModelStatus, format string, look statusLook) error {
	switch format {
	case formatJSON:
		return writeStatusJSON(w, statusDocument(st))
	case formatYAML:
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(statusDocument(st)); err != nil {
			return err
		}
		return enc.Close()
	case formatTabular:
		return renderTabular(w, st, look)
	case formatLine:
		return renderLines(w, st)
	}
	return fmt.Errorf("unknown format %q", format)
}

// statusDoc is ctl status as JSON and YAML. Every field the status shape
// promises is always there (empty lists as []); extras are omitted when
// empty.
type statusDoc struct {
	// SchemaVersion is the document's shape's version: 1. Fields are
	// added within a version; one changed or removed makes the next.
	SchemaVersion int `json:"schema_version" yaml:"schema_version"`
	// Revision is the model's revision the status was read at (what ctl
	// wait --since-revision takes).
	Revision  int64                 `json:"revision,omitempty" yaml:"revision,omitempty"`
	Machines  map[string]machineDoc `json:"machines" yaml:"machines"`
	Services  map[string]serviceDoc `json:"services" yaml:"services"`
	Relations []relationDoc         `json:"relations" yaml:"relations"`
	// Controllers, by id, when any has registered.
	Controllers map[string]controllerDoc `json:"controllers,omitempty" yaml:"controllers,omitempty"`
	// Alarms, when the controller raises any (etcd's database near its
	// quota or full).
	Alarms []string `json:"alarms,omitempty" yaml:"alarms,omitempty"`
	// Operations counts the open operations and the lost tasks.
	Operations operationsStatusDoc `json:"operations" yaml:"operations"`
}

type controllerDoc struct {
	Addresses []string `json:"addresses" yaml:"addresses"`
	Leader    bool     `json:"leader,omitempty" yaml:"leader,omitempty"`
}

type machineDoc struct {
	Life       string   `json:"life" yaml:"life"`
	Instance   string   `json:"instance" yaml:"instance"`
	Address    string   `json:"address" yaml:"address"`
	Agent      string   `json:"agent" yaml:"agent"`
	Units      []string `json:"units" yaml:"units"`
	Message    string   `json:"message,omitempty" yaml:"message,omitempty"`
	Forced     bool     `json:"forced,omitempty" yaml:"forced,omitempty"`
	WaitingFor []string `json:"waiting_for,omitempty" yaml:"waiting_for,omitempty"`
	// Since is when the agent's status was set (RFC 3339), when it was.
	Since string `json:"since,omitempty" yaml:"since,omitempty"`
}

type serviceDoc struct {
	Charm       string             `json:"charm" yaml:"charm"`
	Revision    int64              `json:"revision" yaml:"revision"`
	Life        string             `json:"life" yaml:"life"`
	Status      string             `json:"status" yaml:"status"`
	Units       map[string]unitDoc `json:"units" yaml:"units"`
	Message     string             `json:"message,omitempty" yaml:"message,omitempty"`
	Subordinate bool               `json:"subordinate,omitempty" yaml:"subordinate,omitempty"`
	WaitingFor  []string           `json:"waiting_for,omitempty" yaml:"waiting_for,omitempty"`
	// SpecRevision is the revision of the service's spec (revision is
	// its charm's); Rollout is there while its units move to it.
	SpecRevision int64              `json:"spec_revision,omitempty" yaml:"spec_revision,omitempty"`
	Rollout      *serviceRolloutDoc `json:"rollout,omitempty" yaml:"rollout,omitempty"`
	// Version is the workload's version its charm set
	// (application-version-set).
	Version string `json:"version,omitempty" yaml:"version,omitempty"`
}

type serviceRolloutDoc struct {
	State    string `json:"state" yaml:"state"`
	Target   int64  `json:"target" yaml:"target"`
	Previous int64  `json:"previous" yaml:"previous"`
	Updated  int32  `json:"updated" yaml:"updated"`
	Units    int32  `json:"units" yaml:"units"`
	Reason   string `json:"reason,omitempty" yaml:"reason,omitempty"`
}

type unitDoc struct {
	Life         string   `json:"life" yaml:"life"`
	Machine      string   `json:"machine" yaml:"machine"`
	Principal    string   `json:"principal" yaml:"principal"`
	Agent        string   `json:"agent" yaml:"agent"`
	State        string   `json:"state" yaml:"state"`
	Workload     string   `json:"workload" yaml:"workload"`
	Message      string   `json:"message" yaml:"message"`
	Address      string   `json:"address,omitempty" yaml:"address,omitempty"`
	Subordinates []string `json:"subordinates,omitempty" yaml:"subordinates,omitempty"`
	WaitingFor   []string `json:"waiting_for,omitempty" yaml:"waiting_for,omitempty"`
	// Revision is the revision of its service's spec the unit runs,
	// TargetRevision the one it moves to while it is another.
	Revision       int64 `json:"revision,omitempty" yaml:"revision,omitempty"`
	TargetRevision int64 `json:"target_revision,omitempty" yaml:"target_revision,omitempty"`
	// AgentSince and WorkloadSince are when the agent's and the
	// workload's statuses were set (RFC 3339), when they were.
	AgentSince    string `json:"agent_since,omitempty" yaml:"agent_since,omitempty"`
	WorkloadSince string `json:"workload_since,omitempty" yaml:"workload_since,omitempty"`
	// Ports are the unit's port claims, declared and opened, as its agent
	// last reported them.
	Ports []string `json:"ports,omitempty" yaml:"ports,omitempty"`
	// Leader says the unit is its service's leader.
	Leader bool `json:"leader,omitempty" yaml:"leader,omitempty"`
}

type relationDoc struct {
	ID         int64    `json:"id" yaml:"id"`
	Key        string   `json:"key" yaml:"key"`
	Life       string   `json:"life" yaml:"life"`
	Scope      string   `json:"scope" yaml:"scope"`
	Units      []string `json:"units,omitempty" yaml:"units,omitempty"`
	WaitingFor []string `json:"waiting_for,omitempty" yaml:"waiting_for,omitempty"`
	// Endpoints are the relation's sides, structured (key names them as
	// text).
	Endpoints []endpointDoc `json:"endpoints" yaml:"endpoints"`
}

func statusDocument(st *pb.ModelStatus) statusDoc {
	doc := statusDoc{
		SchemaVersion: statusSchemaVersion,
		Revision:      st.GetRevision(),
		Machines:      map[string]machineDoc{},
		Services:      map[string]serviceDoc{},
		Relations:     []relationDoc{},
	}
	for _, m := range st.GetMachines() {
		doc.Machines[m.Id] = machineDoc{
			Life: m.Life, Instance: m.Instance, Address: m.Address, Agent: m.Agent,
			Units: nonNil(m.Units), Message: m.Message, Forced: m.Forced, WaitingFor: m.WaitingFor,
			Since: sinceText(m.Since),
		}
	}
	for _, s := range st.GetServices() {
		sd := serviceDoc{
			Charm: s.Charm, Revision: s.Revision, Life: s.Life, Status: s.Status,
			Units: map[string]unitDoc{}, Message: s.Message, Subordinate: s.Subordinate, WaitingFor: s.WaitingFor,
			SpecRevision: s.SpecRevision, Version: s.Version,
		}
		if r := s.Rollout; r != nil {
			sd.Rollout = &serviceRolloutDoc{State: r.State, Target: r.Target, Previous: r.Previous, Updated: r.Updated, Units: r.Units, Reason: r.Reason}
		}
		for _, u := range s.Units {
			sd.Units[u.Name] = unitDoc{
				Life: u.Life, Machine: u.Machine, Principal: u.Principal, Agent: u.Agent, State: u.State,
				Workload: u.Workload, Message: u.Message, Address: u.Address,
				Subordinates: u.Subordinates, WaitingFor: u.WaitingFor,
				Revision: u.Revision, TargetRevision: u.TargetRevision,
				AgentSince: sinceText(u.AgentSince), WorkloadSince: sinceText(u.WorkloadSince), Ports: u.Ports,
				Leader: u.Leader,
			}
		}
		doc.Services[s.Name] = sd
	}
	for _, c := range st.GetControllers() {
		if doc.Controllers == nil {
			doc.Controllers = map[string]controllerDoc{}
		}
		doc.Controllers[c.Id] = controllerDoc{Addresses: nonNil(c.Addresses), Leader: c.Leader}
	}
	doc.Alarms = st.GetAlarms()
	doc.Operations = operationsStatusDocument(st.GetOperations())
	rels := append([]*pb.RelationStatus(nil), st.GetRelations()...)
	sort.Slice(rels, func(i, j int) bool { return rels[i].Id < rels[j].Id })
	for _, r := range rels {
		rd := relationDoc{
			ID: r.Id, Key: r.Key, Life: r.Life, Scope: r.Scope, Units: r.Units, WaitingFor: r.WaitingFor,
			Endpoints: []endpointDoc{},
		}
		for _, ep := range r.Endpoints {
			rd.Endpoints = append(rd.Endpoints, endpointDocument(ep))
		}
		doc.Relations = append(doc.Relations, rd)
	}
	return doc
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// renderTabular writes the status as juju status does: a section each for
// machines, services, units (subordinates indented under their
// principals) and relations, the empty ones left out.
func renderTabular(w io.Writer, st *pb.ModelStatus, look statusLook) error {
	paint := painter(look.color)
	// The controller's alarms head the status, whatever the model holds.
	for _, a := range st.GetAlarms() {
		if _, err := fmt.Fprintf(w, "Alarm: %s\n", a); err != nil {
			return err
		}
	}
	// So does the line of operations, when any runs, awaits approval or
	// lost a task.
	ops := operationsLine(st.GetOperations())
	if ops != "" {
		if _, err := fmt.Fprintln(w, ops); err != nil {
			return err
		}
	}
	if (len(st.GetAlarms()) > 0 || ops != "") && len(st.GetMachines())+len(st.GetServices())+len(st.GetRelations()) > 0 {
		fmt.Fprintln(w)
	}
	if len(st.GetMachines())+len(st.GetServices())+len(st.GetRelations()) == 0 {
		_, err := fmt.Fprintln(w, "The model is empty: deploy a charm with ctl deploy.")
		return err
	}
	tw := newTable(w)
	tw.width = look.width
	section := false
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	startSection := func(header ...string) {
		if section {
			row()
		}
		section = true
		row(header...)
	}

	// Controllers are shown when there are several: one is the usual case,
	// and ctl already knows its address.
	if cs := st.GetControllers(); len(cs) > 1 {
		startSection("Controller", "Addresses", "Workers")
		cs = append([]*pb.ControllerStatus(nil), cs...)
		sort.Slice(cs, func(i, j int) bool { return cs[i].Id < cs[j].Id })
		for _, c := range cs {
			workers := "standby"
			if c.Leader {
				workers = "leader"
			}
			row(c.Id, strings.Join(c.Addresses, ","), workers)
		}
	}

	if ms := sortedMachines(st.GetMachines()); len(ms) > 0 {
		startSection("Machine", "Life", paint.plain("Agent"), "Instance", "Address", "Units", "Message")
		for _, m := range ms {
			life := m.Life
			if m.Forced {
				life += " (forced)"
			}
			row(m.Id, life, paint.state(m.Agent), m.Instance, m.Address, strings.Join(m.Units, ","), note(m.Message, m.WaitingFor))
		}
	}

	services := append([]*pb.ServiceStatus(nil), st.GetServices()...)
	sort.Slice(services, func(i, j int) bool { return services[i].Name < services[j].Name })
	if len(services) > 0 {
		// A Version column, as Juju's, only when a service shown has one
		// (application-version-set).
		version := false
		for _, s := range services {
			version = version || s.Version != ""
		}
		head := []string{"Service"}
		if version {
			head = append(head, "Version")
		}
		startSection(append(head, "Charm", "Rev", "Spec", "Life", paint.plain("Status"), "Units", "Message")...)
		for _, s := range services {
			units := strconv.Itoa(len(s.Units))
			if s.Subordinate {
				units += " (subordinate)"
			}
			cells := []string{s.Name}
			if version {
				cells = append(cells, s.Version)
			}
			row(append(cells, s.Charm, strconv.FormatInt(s.Revision, 10), serviceSpecText(s), s.Life, paint.state(s.Status), units, note(s.Message, s.WaitingFor))...)
		}
	}

	if units := unitRows(services); len(units) > 0 {
		// A Ports column, as Juju's, only when a unit shown has ports.
		ports := false
		for _, r := range units {
			ports = ports || len(r.unit.Ports) > 0
		}
		head := []string{"Unit", "Life", "Machine", paint.plain("Agent"), "State", paint.plain("Workload"), "Spec", "Address"}
		if ports {
			head = append(head, "Ports")
		}
		startSection(append(head, "Message")...)
		for _, r := range units {
			u := r.unit
			name := u.Name
			if u.Leader {
				name += "*" // the service's leader, as Juju marks it
			}
			cells := []string{strings.Repeat("  ", r.depth) + name, u.Life, u.Machine, paint.state(u.Agent), u.State, paint.state(u.Workload), unitSpecText(u), u.Address}
			if ports {
				cells = append(cells, strings.Join(u.Ports, ","))
			}
			row(append(cells, note(u.Message, u.WaitingFor))...)
		}
	}

	rels := append([]*pb.RelationStatus(nil), st.GetRelations()...)
	sort.Slice(rels, func(i, j int) bool { return rels[i].Id < rels[j].Id })
	if len(rels) > 0 {
		startSection("Relation", "Endpoints", "Life", "Scope", "Units", "Message")
		for _, r := range rels {
			row(strconv.FormatInt(r.Id, 10), r.Key, r.Life, r.Scope, strconv.Itoa(len(r.Units)), note("", r.WaitingFor))
		}
	}
	return tw.Flush()
}

// serviceSpecText is a service's spec revision as the status shows it:
// "rev 4", or "rev 4 (3/10)" while its rollout is not done (units on 4,
// units), with its state when that is not rolling: "rev 4 (3/10 paused)".
func serviceSpecText(s *pb.ServiceStatus) string {
	if s.SpecRevision == 0 {
		return ""
	}
	r := s.Rollout
	if r == nil {
		return fmt.Sprintf("rev %d", s.SpecRevision)
	}
	if r.State == "rolling" {
		return fmt.Sprintf("rev %d (%d/%d)", s.SpecRevision, r.Updated, r.Units)
	}
	return fmt.Sprintf("rev %d (%d/%d %s)", s.SpecRevision, r.Updated, r.Units, r.State)
}

// unitSpecText is a unit's spec revision as the status shows it: "rev
// 4", or "rev 3→4" while it moves.
func unitSpecText(u *pb.UnitStatus) string {
	switch {
	case u.Revision == 0 && u.TargetRevision == 0:
		return ""
	case u.TargetRevision != 0 && u.TargetRevision != u.Revision:
		return fmt.Sprintf("rev %d→%d", u.Revision, u.TargetRevision)
	}
	return fmt.Sprintf("rev %d", u.Revision)
}

// note is a row's message: the entity's own, then what it waits for.
func note(msg string, waitingFor []string) string {
	parts := []string{}
	if msg != "" {
		parts = append(parts, msg)
	}
	if len(waitingFor) > 0 {
		parts = append(parts, "waiting for "+strings.Join(waitingFor, ", "))
	}
	return strings.Join(parts, "; ")
}

func sortedMachines(ms []*pb.MachineStatus) []*pb.MachineStatus {
	out := append([]*pb.MachineStatus(nil), ms...)
	sort.Slice(out, func(i, j int) bool { return lessNumeric(out[i].Id, out[j].Id) })
	return out
}

// lessNumeric orders decimal ids by value (2 before 10), others as text.
func lessNumeric(a, b string) bool {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	if errA == nil && errB == nil {
		return x < y
	}
	return a < b
}

// lessUnit orders unit names by service, then number.
func lessUnit(a, b string) bool {
	sa, sb := names.UnitService(a), names.UnitService(b)
	if sa != sb {
		return sa < sb
	}
	if na, nb := names.UnitNumber(a), names.UnitNumber(b); na != nb {
		return na < nb
	}
	return a < b
}

type unitRow struct {
	unit  *pb.UnitStatus
	depth int
}

// unitRows lists principals in order, each followed by its subordinates
// (and theirs), indented; subordinates whose principal is not in the status
// come last.
func unitRows(services []*pb.ServiceStatus) []unitRow {
	var all []*pb.UnitStatus
	for _, s := range services {
		all = append(all, s.Units...)
	}
	sort.Slice(all, func(i, j int) bool { return lessUnit(all[i].Name, all[j].Name) })
	known := map[string]bool{}
	children := map[string][]*pb.UnitStatus{}
	for _, u := range all {
		known[u.Name] = true
	}
	for _, u := range all {
		if u.Principal != "" {
			children[u.Principal] = append(children[u.Principal], u)
		}
	}
	var rows []unitRow
	shown := map[string]bool{}
	var add func(u *pb.UnitStatus, depth int)
	add = func(u *pb.UnitStatus, depth int) {
		if shown[u.Name] {
			return
		}
		shown[u.Name] = true
		rows = append(rows, unitRow{unit: u, depth: depth})
		for _, c := range children[u.Name] {
			add(c, depth+1)
		}
	}
	for _, u := range all {
		if u.Principal == "" || !known[u.Principal] {
			add(u, 0)
		}
	}
	for _, u := range all { // a cycle, which the model forbids: show them anyway
		add(u, 0)
	}
	return rows
}

// table is a tabwriter whose lines lose the padding of their empty last
// cells.
type table struct {
	out io.Writer
	buf bytes.Buffer
	// width, when not 0, cuts every line to that many visible
	// characters: a terminal's width.
	width int
	*tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.Writer = tabwriter.NewWriter(&t.buf, 0, 4, 2, ' ', 0)
	return t
}

// Flush writes the table.
func (t *table) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(t.buf.String(), "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, "\n") {
			lines[i] = cutLine(strings.TrimRight(l, " \n"), t.width) + "\n"
		}
	}
	t.buf.Reset()
	_, err := io.WriteString(t.out, strings.Join(lines, ""))
	return err
}

// listSome joins at most n items, saying how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

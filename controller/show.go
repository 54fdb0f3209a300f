package controller

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The bounds of ShowUnit's and ShowMachine's answers: every list is
// capped, the answer saying how much was left out.
const (
	// defaultShowHistory and maxShowHistory bound the status history
	// entries ShowUnit returns.
	defaultShowHistory = 10
	maxShowHistory     = 100
	// maxRelatedUnits bounds the related units ShowUnit lists for one
	// relation, each with its settings (each bounded by
	// state.MaxSettingsBytes).
	maxRelatedUnits = 20
	// maxMachineUnits bounds the units ShowMachine lists.
	maxMachineUnits = 100
)

// ShowUnit returns everything known about one unit: its statuses and
// since when, its revisions, its service's relations with the unit's
// settings and the related units' (as juju show-unit's relation-info),
// its open tasks, its host as its agent last reported it (claims, last
// job, conflicts, daemons) and its recent status history. It reads what
// state.SelectModel reads for the unit, and a bounded amount besides.
func (s *Server) ShowUnit(ctx context.Context, req *pb.ShowUnitRequest) (*pb.ShowUnitResponse, error) {
	name := req.GetUnit()
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	history := int(req.GetHistory())
	if history < 0 || history > maxShowHistory {
		return nil, invalid("history %d: want 1 to %d, or 0 for %d", history, maxShowHistory, defaultShowHistory)
	}
	if history == 0 {
		history = defaultShowHistory
	}
	m, err := s.st.SelectModel(ctx, state.Selection{Units: []string{name}})
	if err != nil {
		return nil, readErr(err, "read unit %s", name)
	}
	st := buildStatus(m, time.Now())
	var u *pb.Unit
	for _, x := range m.Units {
		if x.Name == name {
			u = x
		}
	}
	var us *pb.UnitStatus
	var svc *pb.ServiceStatus
	for _, ss := range st.Services {
		for _, x := range ss.Units {
			if x.Name == name {
				us, svc = x, ss
			}
		}
	}
	if u == nil || us == nil {
		return nil, notFound("unit %s not found", name)
	}
	d := &pb.UnitDetail{
		Name: name, Service: u.Service, Life: us.Life, Machine: us.Machine, Principal: us.Principal,
		Subordinates: us.Subordinates, Address: us.Address, Charm: svc.Charm, CharmRevision: svc.Revision,
		Agent: &pb.StatusDetail{Status: us.Agent, Message: us.AgentMessage, SinceUnixNano: us.AgentSince},
		State: us.State,
		Workload: &pb.StatusDetail{Status: us.Workload, Message: m.Status(state.StatusUnit, name).GetMessage(),
			SinceUnixNano: us.WorkloadSince},
		Revision: us.Revision, TargetRevision: us.TargetRevision, WaitingFor: us.WaitingFor,
	}
	for _, rel := range m.Relations {
		ur, err := s.unitRelation(ctx, m, u, rel)
		if err != nil {
			return nil, err
		}
		if ur != nil {
			d.Relations = append(d.Relations, ur)
		}
	}
	if d.OpenTasks, err = s.openTasks(ctx, name); err != nil {
		return nil, err
	}
	hr, err := s.st.HostReport(ctx, name)
	if err != nil {
		return nil, readErr(err, "read the host report of unit %s", name)
	}
	if hr != nil {
		d.HostClaims, d.LastJob, d.HostRevision, d.HostConflicts = hr.Claims, hr.LastJob, hr.AppliedRevision, hr.Conflicts
		d.Daemons, d.HostReportedUnixNano = hr.Daemons, hr.ReportedUnixNano
	}
	h, err := s.st.StatusHistory(ctx, name, history)
	if err != nil {
		return nil, readErr(err, "read the status history of unit %s", name)
	}
	for _, e := range h {
		kind := logKindWorkload
		if e.Kind == state.StatusUnitAgent {
			kind = logKindAgent
		}
		d.History = append(d.History, &pb.StatusDetail{Kind: kind, Status: e.Status.GetStatus(), Message: e.Status.GetMessage(),
			SinceUnixNano: e.Status.GetSinceUnixNano(), Data: e.Status.GetData()})
	}
	return &pb.ShowUnitResponse{Unit: d}, nil
}

// unitRelation is rel as unit u sees it, or nil when u's service is not
// one of its sides (a relation of a subordinate's service).
func (s *Server) unitRelation(ctx context.Context, m *state.Model, u *pb.Unit, rel *pb.Relation) (*pb.UnitRelation, error) {
	ur := &pb.UnitRelation{Id: rel.Id, Key: rel.Key, Life: state.LifeName(rel.Life), Scope: scopeName(rel.Scope),
		InScope: slices.Contains(m.Scopes[rel.Id], u.Name)}
	var others []string // services whose units are related
	for _, ep := range rel.Endpoints {
		if ep.Service == u.Service && ur.Endpoint == nil {
			ur.Endpoint = endpointStatus(ep)
			continue
		}
		ur.RelatedEndpoints = append(ur.RelatedEndpoints, endpointStatus(ep))
		others = append(others, ep.Service)
	}
	if ur.Endpoint == nil {
		return nil, nil
	}
	if len(others) == 0 { // a peer relation: the service's other units
		others = []string{u.Service}
	}
	var related []string
	if rel.Scope == pb.Scope_SCOPE_CONTAINER {
		// Those on its machine: its principal, or its subordinates, in
		// the scope.
		for _, o := range m.Units {
			if slices.Contains(others, o.Service) && (o.Name == u.Principal || o.Principal == u.Name) &&
				slices.Contains(m.Scopes[rel.Id], o.Name) {
				related = append(related, o.Name)
			}
		}
	} else {
		for _, svc := range others {
			units, count, err := s.st.ScopeUnitsOf(ctx, rel.Id, svc, maxRelatedUnits+1)
			if err != nil {
				return nil, readErr(err, "read the scope of relation %d", rel.Id)
			}
			units = slices.DeleteFunc(units, func(x string) bool { return x == u.Name })
			if svc == u.Service && ur.InScope {
				count-- // the unit itself, in a peer relation's scope
			}
			related = append(related, units...)
			ur.RelatedUnitsCut += int32(max(0, int(count)-len(units)))
		}
	}
	sort.Slice(related, func(i, j int) bool { return unitLess(related[i], related[j]) })
	if len(related) > maxRelatedUnits {
		ur.RelatedUnitsCut += int32(len(related) - maxRelatedUnits)
		related = related[:maxRelatedUnits]
	}
	settings, err := s.st.SettingsOf(ctx, rel.Id, append([]string{u.Name}, related...))
	if err != nil {
		return nil, readErr(err, "read the settings of relation %d", rel.Id)
	}
	if ur.InScope {
		ur.Settings = settings[u.Name]
	}
	for _, r := range related {
		ur.RelatedUnits = append(ur.RelatedUnits, &pb.RelatedUnit{Unit: r, Settings: settings[r]})
	}
	return ur, nil
}

// openTasks lists a unit's open tasks with their operations' actions.
func (s *Server) openTasks(ctx context.Context, unit string) ([]*pb.UnitTask, error) {
	open, err := s.st.UnitTasks(ctx, unit)
	if err != nil {
		return nil, readErr(err, "read the tasks of unit %s", unit)
	}
	ids := make([]int64, 0, len(open))
	for id := range open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*pb.UnitTask, 0, len(ids))
	for _, id := range ids {
		t := &pb.UnitTask{Operation: id, State: open[id]}
		if op, err := s.st.Operation(ctx, id); err == nil {
			t.Action = op.Action
		}
		out = append(out, t)
	}
	return out, nil
}

// ShowMachine returns everything known about one machine: its agent and
// since when, its instance, and its units (principals, each followed by
// its subordinates), at most maxMachineUnits of them.
func (s *Server) ShowMachine(ctx context.Context, req *pb.ShowMachineRequest) (*pb.ShowMachineResponse, error) {
	id := req.GetMachine()
	if err := checkMachineID(id); err != nil {
		return nil, err
	}
	m, err := s.st.SelectModel(ctx, state.Selection{Machines: []string{id}})
	if err != nil {
		return nil, readErr(err, "read machine %s", id)
	}
	st := buildStatus(m, time.Now())
	var mach *pb.Machine
	for _, x := range m.Machines {
		if x.Id == id {
			mach = x
		}
	}
	var ms *pb.MachineStatus
	for _, x := range st.Machines {
		if x.Id == id {
			ms = x
		}
	}
	if mach == nil || ms == nil {
		return nil, notFound("machine %s not found", id)
	}
	d := &pb.MachineDetail{Id: id, Life: ms.Life, Instance: ms.Instance, Address: ms.Address, Manual: mach.Manual,
		Forced: ms.Forced, Agent: &pb.StatusDetail{Status: ms.Agent, Message: ms.Message, SinceUnixNano: ms.Since},
		WaitingFor: ms.WaitingFor}
	byName := map[string]*pb.UnitStatus{}
	for _, ss := range st.Services {
		for _, us := range ss.Units {
			byName[us.Name] = us
		}
	}
	var units []*pb.MachineUnit
	add := func(us *pb.UnitStatus) {
		units = append(units, &pb.MachineUnit{Name: us.Name, Life: us.Life, Principal: us.Principal, Agent: us.Agent,
			Workload: us.Workload, Message: us.Message, Revision: us.Revision})
	}
	principals := slices.Clone(ms.Units)
	sort.Slice(principals, func(i, j int) bool { return unitLess(principals[i], principals[j]) })
	for _, p := range principals {
		us := byName[p]
		if us == nil {
			continue
		}
		add(us)
		subs := slices.Clone(us.Subordinates)
		sort.Slice(subs, func(i, j int) bool { return unitLess(subs[i], subs[j]) })
		for _, sub := range subs {
			if byName[sub] != nil {
				add(byName[sub])
			}
		}
	}
	if len(units) > maxMachineUnits {
		d.UnitsCut = int32(len(units) - maxMachineUnits)
		units = units[:maxMachineUnits]
	}
	d.Units = units
	return &pb.ShowMachineResponse{Machine: d}, nil
}

// unitLess orders unit names by service, then number.
func unitLess(a, b string) bool {
	if sa, sb := names.UnitService(a), names.UnitService(b); sa != sb {
		return sa < sb
	}
	return names.UnitNumber(a) < names.UnitNumber(b)
}

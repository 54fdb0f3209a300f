package controller

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// agentServer implements AgentService. Each method authorizes its caller
// (see authz.go) and then makes one call to state, which enforces the life
// rules; a refused call changes nothing.
type agentServer struct {
	pb.UnimplementedAgentServiceServer
	s *Server
}

// maxRecordBytes bounds what an agent writes in one status or settings
// record, well inside etcd's request limit (1.5 MiB by default).
const maxRecordBytes = 64 << 10

// charmChunkBytes is the size of DownloadCharm's chunks.
const charmChunkBytes = 1 << 20

// readBatch is the most names state's bulk reads (UnitsNamed,
// ServicesNamed) take at once.
const readBatch = state.MaxTxnOps

// GetMachine returns the caller's machine.
func (a *agentServer) GetMachine(ctx context.Context, req *pb.GetMachineRequest) (*pb.GetMachineResponse, error) {
	c := callerFrom(ctx)
	if err := ownMachine(c, req.GetMachine(), "read"); err != nil {
		return nil, err
	}
	m, err := a.s.st.Machine(ctx, req.GetMachine())
	if err != nil {
		return nil, readErr(err, "read machine %s", req.GetMachine())
	}
	return &pb.GetMachineResponse{Machine: m}, nil
}

// EnsureMachineDead sets the caller's dying machine dead (M3).
func (a *agentServer) EnsureMachineDead(ctx context.Context, req *pb.EnsureMachineDeadRequest) (*pb.EnsureMachineDeadResponse, error) {
	c := callerFrom(ctx)
	if err := ownMachine(c, req.GetMachine(), "set dead"); err != nil {
		return nil, err
	}
	if err := a.s.st.EnsureMachineDead(ctx, req.GetMachine()); err != nil {
		return nil, err
	}
	return &pb.EnsureMachineDeadResponse{}, nil
}

// SetMachineStatus records the caller's machine agent status.
func (a *agentServer) SetMachineStatus(ctx context.Context, req *pb.SetMachineStatusRequest) (*pb.SetMachineStatusResponse, error) {
	c := callerFrom(ctx)
	if err := ownMachine(c, req.GetMachine(), "set the status of"); err != nil {
		return nil, err
	}
	if err := checkStatus(req.GetStatus()); err != nil {
		return nil, err
	}
	if err := a.s.st.SetStatus(ctx, state.StatusMachine, req.GetMachine(), req.GetStatus()); err != nil {
		return nil, err
	}
	return &pb.SetMachineStatusResponse{}, nil
}

// IssueUnitCredentials gives units on the caller's machine new
// credentials, revoking any earlier ones, in one transaction: to all of
// them, or to none when any is not the caller's to ask for. Only the hash
// of each secret is stored. An agent that names its instance is refused
// unless that instance holds its machine's presence.
func (a *agentServer) IssueUnitCredentials(ctx context.Context, req *pb.IssueUnitCredentialsRequest) (*pb.IssueUnitCredentialsResponse, error) {
	c := callerFrom(ctx)
	units := req.GetUnits()
	switch {
	case len(units) == 0:
		return nil, invalid("IssueUnitCredentials names no unit")
	case len(units) > state.MaxCredentialsAtOnce:
		return nil, invalid("IssueUnitCredentials names %d units: at most %d a call", len(units), state.MaxCredentialsAtOnce)
	}
	seen := make(map[string]bool, len(units))
	for _, name := range units {
		if err := checkUnitName(name); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, invalid("IssueUnitCredentials names unit %s twice", name)
		}
		seen[name] = true
	}
	const verb = "issue a credential for"
	if c.kind != names.KindMachine {
		return nil, denied("%s may not %s unit %s", c, verb, units[0])
	}
	found, err := a.s.st.UnitsNamed(ctx, units...)
	if err != nil {
		return nil, readErr(err, "read units %s", strings.Join(units, ", "))
	}
	resp := &pb.IssueUnitCredentialsResponse{Credentials: make([]*pb.UnitCredential, len(units))}
	hashes := make(map[string]string, len(units))
	for i, u := range found {
		if err := onMachine(c, units[i], u, verb); err != nil {
			return nil, err
		}
		cred, hash, err := pki.NewCredential(names.UnitTag(u.Name))
		if err != nil {
			return nil, err
		}
		resp.Credentials[i] = &pb.UnitCredential{Unit: u.Name, Tag: cred.Tag, Secret: cred.Secret}
		hashes[cred.Tag] = hash
	}
	if req.GetInstance() != "" {
		// The agent's instance must be its machine's present one, or a
		// second agent of the machine would revoke the first's units.
		err = a.s.st.SetCredentialsWhilePresent(ctx, hashes, names.MachineTag(c.id), req.GetInstance())
	} else {
		err = a.s.st.SetCredentials(ctx, hashes)
	}
	if err != nil {
		return nil, err
	}
	a.s.logger.Info("issued unit credentials", "units", units, "machine", c.id)
	return resp, nil
}

// GetUnit returns a unit the caller may see.
func (a *agentServer) GetUnit(ctx context.Context, req *pb.GetUnitRequest) (*pb.GetUnitResponse, error) {
	u, err := a.visibleUnit(ctx, callerFrom(ctx), req.GetUnit(), "read")
	if err != nil {
		return nil, err
	}
	return &pb.GetUnitResponse{Unit: u}, nil
}

// UnitScopes returns the relations whose scope the caller's unit is in,
// with its endpoint in each.
func (a *agentServer) UnitScopes(ctx context.Context, req *pb.UnitScopesRequest) (*pb.UnitScopesResponse, error) {
	unit := req.GetUnit()
	if err := ownUnit(callerFrom(ctx), unit, "read the scopes of"); err != nil {
		return nil, err
	}
	ids, err := a.s.st.UnitScopes(ctx, unit)
	if err != nil {
		return nil, readErr(err, "read the scopes of unit %s", unit)
	}
	resp := &pb.UnitScopesResponse{}
	for _, id := range ids {
		rel, err := a.s.st.Relation(ctx, id)
		if isNotFound(err) {
			continue // removed since: the unit is not in its scope (I4)
		}
		if err != nil {
			return nil, readErr(err, "read relation %d", id)
		}
		for _, ep := range rel.Endpoints {
			if ep.Service == names.UnitService(unit) {
				resp.Scopes = append(resp.Scopes, &pb.UnitScope{Relation: id, Endpoint: ep.GetEndpoint().GetName()})
				break
			}
		}
	}
	return resp, nil
}

// RemoveUnit removes a dead unit (U5): a principal on the caller's machine,
// by its machine agent, or a subordinate of the caller's unit, by its
// principal's agent.
func (a *agentServer) RemoveUnit(ctx context.Context, req *pb.RemoveUnitRequest) (*pb.RemoveUnitResponse, error) {
	c := callerFrom(ctx)
	name := req.GetUnit()
	var err error
	switch c.kind {
	case names.KindMachine:
		if err := checkUnitName(name); err != nil {
			return nil, err
		}
		err = a.removePrincipal(ctx, c, name)
	default:
		if _, err = a.subordinateUnit(ctx, c, name, "remove"); err == nil {
			err = a.s.st.RemoveUnit(ctx, name)
		}
	}
	if err != nil {
		return nil, err
	}
	return &pb.RemoveUnitResponse{}, nil
}

// removePrincipal removes the dead principal unit name from the caller's
// machine, its machine agent's.
func (a *agentServer) removePrincipal(ctx context.Context, c caller, name string) error {
	// Checked on the unit as the removal reads it, not read apart.
	return a.s.st.RemoveUnitIf(ctx, name, func(u *pb.Unit) error {
		if err := onMachine(c, name, u, "remove"); err != nil {
			return err
		}
		if u.Principal != "" {
			return denied("%s may not remove unit %s: a subordinate is removed by its principal %s's agent", c, u.Name, u.Principal)
		}
		return nil
	})
}

// maxRemovals bounds the units of a RemoveUnits call.
const maxRemovals = state.MaxTxnOps

// RemoveUnits removes dead principal units of the caller's machine, each as
// RemoveUnit would and in a transaction of its own, side by side
// (handlerWorkers.sideBySide), and answers each on its own.
func (a *agentServer) RemoveUnits(ctx context.Context, req *pb.RemoveUnitsRequest) (*pb.RemoveUnitsResponse, error) {
	c := callerFrom(ctx)
	units := req.GetUnits()
	switch {
	case len(units) == 0:
		return nil, invalid("RemoveUnits names no unit")
	case len(units) > maxRemovals:
		return nil, invalid("RemoveUnits names %d units: at most %d a call", len(units), maxRemovals)
	case c.kind != names.KindMachine:
		return nil, denied("%s may not remove units together: only a machine agent may, the dead principals of its machine", c)
	}
	seen := make(map[string]bool, len(units))
	for _, name := range units {
		if err := checkUnitName(name); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, invalid("unit %s is named twice", name)
		}
		seen[name] = true
	}
	resp := &pb.RemoveUnitsResponse{Results: make([]*pb.StatusReportResult, len(units))}
	a.s.workers.sideBySide(len(units), func(i int) {
		resp.Results[i] = reportResult(a.removePrincipal(ctx, c, units[i]))
	})
	return resp, nil
}

// GetService returns a service the caller may see, with its configuration
// and its charm's record.
func (a *agentServer) GetService(ctx context.Context, req *pb.GetServiceRequest) (*pb.GetServiceResponse, error) {
	name := req.GetService()
	if err := a.serviceAllowed(ctx, callerFrom(ctx), name, "read"); err != nil {
		return nil, err
	}
	svc, err := a.s.st.Service(ctx, name)
	if err != nil {
		return nil, readErr(err, "read service %s", name)
	}
	cfg, err := a.s.st.ServiceConfig(ctx, name)
	if err != nil {
		return nil, readErr(err, "read the configuration of service %s", name)
	}
	ch, err := a.s.st.Charm(ctx, svc.GetCharm().GetName(), svc.GetCharm().GetRevision())
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	return &pb.GetServiceResponse{Service: svc, Config: cfg, Charm: ch}, nil
}

// DownloadCharm streams the archive of a charm revision that a service of
// the caller's units uses, in chunks of charmChunkBytes.
func (a *agentServer) DownloadCharm(req *pb.DownloadCharmRequest, stream pb.AgentService_DownloadCharmServer) error {
	ctx := stream.Context()
	c := callerFrom(ctx)
	name, rev := req.GetName(), req.GetRevision()
	if !names.ValidService(name) {
		return invalid("invalid charm name %q", name)
	}
	if rev < 1 {
		// state.Charm reads revision 0 as the latest; an agent asks for
		// the one its service uses.
		return invalid("invalid charm revision %d: want a revision, from 1", rev)
	}
	if err := a.charmAllowed(ctx, c, name, rev); err != nil {
		return err
	}
	ch, err := a.s.st.Charm(ctx, name, rev)
	if err != nil {
		return readErr(err, "read charm %s revision %d", name, rev)
	}
	archive, err := a.s.st.CharmArchive(ctx, ch)
	if err != nil {
		return readErr(err, "read the archive of charm %s revision %d", name, rev)
	}
	for off := 0; off < len(archive); off += charmChunkBytes {
		chunk := archive[off:min(off+charmChunkBytes, len(archive))]
		if err := stream.Send(&pb.DownloadCharmResponse{Chunk: chunk}); err != nil {
			return err
		}
	}
	return nil
}

// charmAllowed checks that a service of the caller's units uses revision
// rev of the named charm. It needs no read of the charm. A unit's agent
// asking for its own service's charm, as every new unit does, is let
// through on one read, of that service.
func (a *agentServer) charmAllowed(ctx context.Context, c caller, name string, rev int64) error {
	if c.kind == names.KindUnit {
		own := names.UnitService(c.id)
		svcs, err := a.s.st.ServicesNamed(ctx, own)
		if err != nil {
			return readErr(err, "read service %s", own)
		}
		if ch := svcs[0].GetCharm(); ch.GetName() == name && ch.GetRevision() == rev {
			return nil
		}
	}
	services, err := a.callerServices(ctx, c)
	if err != nil {
		return err
	}
	for len(services) > 0 {
		batch := services[:min(len(services), readBatch)]
		services = services[len(batch):]
		svcs, err := a.s.st.ServicesNamed(ctx, batch...)
		if err != nil {
			return readErr(err, "read services %v", batch)
		}
		for _, svc := range svcs {
			if svc.GetCharm().GetName() == name && svc.GetCharm().GetRevision() == rev {
				return nil
			}
		}
	}
	return denied("%s may not download charm %s revision %d: none of its units uses it", c, name, rev)
}

// SetUnitDying sets the caller's unit, or one of its subordinates, dying (U2).
func (a *agentServer) SetUnitDying(ctx context.Context, req *pb.SetUnitDyingRequest) (*pb.SetUnitDyingResponse, error) {
	c := callerFrom(ctx)
	name := req.GetUnit()
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	if c.kind != names.KindUnit || c.id != name {
		if _, err := a.subordinateUnit(ctx, c, name, "destroy"); err != nil {
			return nil, err
		}
	}
	if err := a.s.st.DestroyUnit(ctx, name, state.DestroyOptions{}); err != nil {
		return nil, err
	}
	return &pb.SetUnitDyingResponse{}, nil
}

// maxLeaveScopes bounds the scopes one EnsureUnitDead call leaves.
const maxLeaveScopes = 256

// EnsureUnitDead sets the caller's unit dead once it is out of every
// relation and has no subordinates (U3), after leaving the scopes the
// request names, each as LeaveScope would (state.EnsureUnitDead): a dying
// unit's agent with no hook to run in between sends its last departures
// here, in one call.
func (a *agentServer) EnsureUnitDead(ctx context.Context, req *pb.EnsureUnitDeadRequest) (*pb.EnsureUnitDeadResponse, error) {
	c := callerFrom(ctx)
	if err := ownUnit(c, req.GetUnit(), "set dead"); err != nil {
		return nil, err
	}
	if n := len(req.GetLeaveScopes()); n > maxLeaveScopes {
		return nil, status.Errorf(codes.InvalidArgument, "a call may leave at most %d scopes before setting the unit dead, not %d", maxLeaveScopes, n)
	}
	// Every departure is checked before any is made; a relation gone has
	// no scope left to leave.
	var leave []int64
	for _, id := range req.GetLeaveScopes() {
		err := a.unitInRelation(ctx, c, id, "leave")
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		leave = append(leave, id)
	}
	if err := a.s.st.EnsureUnitDead(ctx, req.GetUnit(), leave...); err != nil {
		return nil, err
	}
	return &pb.EnsureUnitDeadResponse{}, nil
}

// AddSubordinate returns, creating it if need be, the caller's unit of a
// subordinate service that the caller's service is related to in container
// scope by an alive relation. The relation is checked when the call is
// made; should it become dying just after, the new subordinate's agent
// sees that and departs as for any dying relation.
func (a *agentServer) AddSubordinate(ctx context.Context, req *pb.AddSubordinateRequest) (*pb.AddSubordinateResponse, error) {
	c := callerFrom(ctx)
	principal, sub := req.GetPrincipal(), req.GetService()
	if err := ownUnit(c, principal, "add a subordinate to"); err != nil {
		return nil, err
	}
	if err := checkServiceName(sub); err != nil {
		return nil, err
	}
	own := names.UnitService(principal)
	if sub == own {
		return nil, invalid("unit %s cannot be its own service's subordinate", principal)
	}
	rels, err := a.s.st.RelationsBetween(ctx, own, sub)
	if err != nil {
		return nil, readErr(err, "find relations between %s and %s", own, sub)
	}
	var dying *pb.Relation
	for _, rel := range rels {
		if rel.Scope != pb.Scope_SCOPE_CONTAINER {
			continue
		}
		if rel.Life != pb.Life_LIFE_ALIVE {
			dying = rel
			continue
		}
		u, err := a.s.st.AddSubordinate(ctx, principal, sub)
		if err != nil {
			return nil, err
		}
		return &pb.AddSubordinateResponse{Unit: u}, nil
	}
	if dying != nil {
		return nil, failedPrecondition("relation %d (%s) is %s: subordinates are added only for an alive relation",
			dying.Id, dying.Key, state.LifeName(dying.Life))
	}
	return nil, denied("%s may not add a unit of %s: services %s and %s are not related in container scope", c, sub, own, sub)
}

// EnterScope puts the caller's unit in the scope of a relation its service
// is in (R1).
func (a *agentServer) EnterScope(ctx context.Context, req *pb.EnterScopeRequest) (*pb.EnterScopeResponse, error) {
	c := callerFrom(ctx)
	if err := ownUnit(c, req.GetUnit(), "enter a relation as"); err != nil {
		return nil, err
	}
	if err := checkSettingsSize(req.GetSettings()); err != nil {
		return nil, err
	}
	if err := a.unitInRelation(ctx, c, req.GetRelation(), "enter"); err != nil {
		return nil, err
	}
	if err := a.s.st.EnterScope(ctx, req.GetRelation(), req.GetUnit(), req.GetSettings()); err != nil {
		return nil, err
	}
	return &pb.EnterScopeResponse{}, nil
}

// LeaveScope takes the caller's unit out of a relation's scope (R3). Like
// state.LeaveScope it is idempotent: leaving a relation that no longer
// exists does nothing, since the caller cannot be in its scope (I4), and
// that is what an agent retrying after a lost reply needs.
func (a *agentServer) LeaveScope(ctx context.Context, req *pb.LeaveScopeRequest) (*pb.LeaveScopeResponse, error) {
	c := callerFrom(ctx)
	if err := ownUnit(c, req.GetUnit(), "leave a relation as"); err != nil {
		return nil, err
	}
	err := a.unitInRelation(ctx, c, req.GetRelation(), "leave")
	if isNotFound(err) {
		return &pb.LeaveScopeResponse{}, nil // a relation gone is left already
	}
	if err != nil {
		return nil, err
	}
	if err := a.s.st.LeaveScope(ctx, req.GetRelation(), req.GetUnit()); err != nil {
		return nil, err
	}
	return &pb.LeaveScopeResponse{}, nil
}

// ReadSettings returns a unit's settings in a relation the caller's service
// is in: the caller's own, or those of a unit in the relation's scope on
// the other side (any other unit of a peer relation), as relation-get
// allows; in a container-scoped relation only of a unit on the caller's
// machine.
func (a *agentServer) ReadSettings(ctx context.Context, req *pb.ReadSettingsRequest) (*pb.ReadSettingsResponse, error) {
	if req.GetService() != "" {
		return a.readAppSettings(ctx, req)
	}
	c := callerFrom(ctx)
	id, name := req.GetRelation(), req.GetUnit()
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	rel, err := a.unitRelation(ctx, c, id, "read the settings of")
	if err != nil {
		return nil, err
	}
	if name != c.id && len(rel.Endpoints) > 1 && names.UnitService(name) == names.UnitService(c.id) {
		// A unit's side of a relation sees only the other side's
		// settings: two units of one service share nothing through it.
		return nil, denied("%s may not read the settings of unit %s in relation %d (%s): it is on its own side of the relation",
			c, name, id, rel.Key)
	}
	if name != c.id && rel.Scope == pb.Scope_SCOPE_CONTAINER {
		us, err := a.s.st.UnitsNamed(ctx, name, c.id)
		if err != nil {
			return nil, readErr(err, "read units %s and %s", name, c.id)
		}
		switch target, own := us[0], us[1]; {
		case target == nil:
			return nil, notFound("unit %s not found", name)
		case own == nil:
			return nil, notFound("unit %s not found", c.id)
		case target.MachineId != own.MachineId:
			return nil, denied("%s may not read the settings of unit %s in relation %d (%s): the relation is container-scoped and %s is on another machine",
				c, name, id, rel.Key, name)
		}
	}
	values, version, err := a.s.st.Settings(ctx, id, name)
	if err != nil {
		return nil, readErr(err, "read the settings of %s in relation %d", name, id)
	}
	return &pb.ReadSettingsResponse{Settings: values, Version: version}, nil
}

// UpdateSettings applies the caller's settings changes across its
// relations in one transaction; state refuses a relation whose scope the
// unit is not in, and the unit can be only in relations of its service.
func (a *agentServer) UpdateSettings(ctx context.Context, req *pb.UpdateSettingsRequest) (*pb.UpdateSettingsResponse, error) {
	if err := ownUnit(callerFrom(ctx), req.GetUnit(), "write the settings of"); err != nil {
		return nil, err
	}
	changes := make([]state.SettingsChange, len(req.GetUpdates()))
	seen := map[int64]bool{}
	for i, u := range req.GetUpdates() {
		if err := checkRelationID(u.GetRelation()); err != nil {
			return nil, err
		}
		if seen[u.GetRelation()] {
			return nil, invalid("relation %d is updated twice: merge the changes", u.GetRelation())
		}
		seen[u.GetRelation()] = true
		if proto.Size(u) > maxRecordBytes {
			return nil, invalid("settings update of relation %d is %d bytes: at most %d", u.GetRelation(), proto.Size(u), maxRecordBytes)
		}
		changes[i] = state.SettingsChange{Relation: u.GetRelation(), Set: u.GetSet(), Unset: u.GetUnset()}
	}
	appChanges, err := appSettingsChanges(req.GetAppUpdates())
	if err != nil {
		return nil, err
	}
	// The service's settings first: a unit that is not its leader
	// (relation-set --app) fails the whole update, as Juju fails the hook.
	if len(appChanges) > 0 {
		if err := a.s.st.UpdateAppSettings(ctx, req.GetUnit(), appChanges); err != nil {
			return nil, err
		}
	}
	if len(changes) == 0 {
		return &pb.UpdateSettingsResponse{}, nil
	}
	if err := a.s.st.UpdateSettings(ctx, req.GetUnit(), changes); err != nil {
		return nil, err
	}
	return &pb.UpdateSettingsResponse{}, nil
}

// SetUnitStatus records a unit's status: a unit agent its own, agent or
// workload; a machine agent the agent status of a unit on its machine
// (reporting, say, a unit agent it cannot start). A progress report is
// declined while the controller's writes queue (Config.Busy).
func (a *agentServer) SetUnitStatus(ctx context.Context, req *pb.SetUnitStatusRequest) (*pb.SetUnitStatusResponse, error) {
	c := callerFrom(ctx)
	name := req.GetUnit()
	var kind state.StatusKind
	switch req.GetKind() {
	case pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT:
		kind = state.StatusUnitAgent
	case pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD:
		kind = state.StatusUnit
	case pb.UnitStatusKind_UNIT_STATUS_KIND_SERVICE:
		kind = state.StatusService
	case pb.UnitStatusKind_UNIT_STATUS_KIND_SERVICE_VERSION:
		kind = state.StatusServiceVersion
	default:
		return nil, invalid("unit status kind %v: want agent, workload, service or service version", req.GetKind())
	}
	if kind == state.StatusServiceVersion {
		// An empty version clears it.
		if n := len(req.GetStatus().GetStatus()); n > state.MaxVersionBytes {
			return nil, invalid("version is %d bytes: at most %d", n, state.MaxVersionBytes)
		}
	} else if err := checkStatus(req.GetStatus()); err != nil {
		return nil, err
	}
	if kind == state.StatusService || kind == state.StatusServiceVersion {
		// A unit's charm sets its service's status and version: only
		// the unit's own agent may.
		if err := ownUnit(c, name, "set the service status of"); err != nil {
			return nil, err
		}
		if err := a.s.st.SetStatus(ctx, kind, names.UnitService(name), req.GetStatus()); err != nil {
			return nil, err
		}
		return &pb.SetUnitStatusResponse{}, nil
	}
	switch {
	case c.kind == names.KindMachine && kind == state.StatusUnit:
		if err := checkUnitName(name); err != nil {
			return nil, err
		}
		return nil, denied("%s may not set the workload status of unit %s: only its own agent may", c, name)
	case c.kind == names.KindMachine:
		if _, err := a.machineUnit(ctx, c, name, "set the status of"); err != nil {
			return nil, err
		}
	default:
		if err := ownUnit(c, name, "set the status of"); err != nil {
			return nil, err
		}
	}
	if req.GetProgress() && a.s.cfg.Busy() {
		// A report of which hook runs matters less than the writes
		// queued ahead of it, and the agent's next report replaces it.
		return nil, status.Error(codes.ResourceExhausted, "the controller is busy: progress report declined")
	}
	if err := a.s.st.SetStatus(ctx, kind, name, req.GetStatus()); err != nil {
		return nil, err
	}
	return &pb.SetUnitStatusResponse{}, nil
}

// maxStatusReports bounds the reports of a SetUnitStatuses call: the
// units a read of the controller's may name.
const maxStatusReports = state.MaxTxnOps

// SetUnitStatuses records the agent statuses of units on the caller's
// machine, each answered on its own (SetUnitStatus's answer to it alone).
func (a *agentServer) SetUnitStatuses(ctx context.Context, req *pb.SetUnitStatusesRequest) (*pb.SetUnitStatusesResponse, error) {
	c := callerFrom(ctx)
	reports := req.GetReports()
	switch {
	case len(reports) == 0:
		return nil, invalid("SetUnitStatuses has no report")
	case len(reports) > maxStatusReports:
		return nil, invalid("SetUnitStatuses has %d reports: at most %d a call", len(reports), maxStatusReports)
	case c.kind != names.KindMachine:
		return nil, denied("%s may not set the statuses of units: only a machine agent may, of those on its machine", c)
	}
	units := make([]string, len(reports))
	seen := make(map[string]bool, len(reports))
	for i, r := range reports {
		if err := checkUnitName(r.GetUnit()); err != nil {
			return nil, err
		}
		if r.GetKind() != pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT {
			return nil, invalid("report of unit %s: kind %v, want agent: a machine agent sets only its units' agent statuses", r.GetUnit(), r.GetKind())
		}
		if err := checkStatus(r.GetStatus()); err != nil {
			return nil, err
		}
		if seen[r.GetUnit()] {
			return nil, invalid("unit %s is reported twice", r.GetUnit())
		}
		seen[r.GetUnit()] = true
		units[i] = r.GetUnit()
	}
	found, err := a.s.st.UnitsNamed(ctx, units...)
	if err != nil {
		return nil, readErr(err, "read units %s", strings.Join(units, ", "))
	}
	resp := &pb.SetUnitStatusesResponse{Results: make([]*pb.StatusReportResult, len(reports))}
	busy := a.s.cfg.Busy()
	var todo []state.UnitStatus
	var at []int
	for i, u := range found {
		switch err := onMachine(c, units[i], u, "set the status of"); {
		case err != nil:
			resp.Results[i] = reportResult(err)
		case reports[i].GetProgress() && busy:
			resp.Results[i] = reportResult(status.Error(codes.ResourceExhausted, "the controller is busy: progress report declined"))
		default:
			todo = append(todo, state.UnitStatus{Kind: state.StatusUnitAgent, Unit: units[i], Status: reports[i].GetStatus()})
			at = append(at, i)
		}
	}
	if len(todo) > 0 {
		errs, err := a.s.st.SetUnitStatuses(ctx, todo)
		if err != nil {
			return nil, err
		}
		for j, err := range errs {
			resp.Results[at[j]] = reportResult(err)
		}
	}
	return resp, nil
}

// reportResult is a report's answer within a SetUnitStatuses call.
func reportResult(err error) *pb.StatusReportResult {
	s := status.Convert(toStatus(err))
	return &pb.StatusReportResult{Code: uint32(s.Code()), Message: s.Message()}
}

// ClearResolved removes the caller's resolved mark once it has acted on it.
func (a *agentServer) ClearResolved(ctx context.Context, req *pb.ClearResolvedRequest) (*pb.ClearResolvedResponse, error) {
	if err := ownUnit(callerFrom(ctx), req.GetUnit(), "clear the resolved mark of"); err != nil {
		return nil, err
	}
	if err := a.s.st.ClearResolved(ctx, req.GetUnit()); err != nil {
		return nil, fmt.Errorf("clear the resolved mark of %s: %w", req.GetUnit(), err)
	}
	return &pb.ClearResolvedResponse{}, nil
}

func checkStatus(st *pb.Status) error {
	switch {
	case st == nil || st.GetStatus() == "":
		return invalid("a status needs a status value")
	case proto.Size(st) > maxRecordBytes:
		return invalid("status is %d bytes: at most %d", proto.Size(st), maxRecordBytes)
	}
	return nil
}

func checkSettingsSize(settings map[string]string) error {
	if n := proto.Size(&pb.Settings{Values: settings}); n > maxRecordBytes {
		return invalid("settings are %d bytes: at most %d", n, maxRecordBytes)
	}
	return nil
}

// GetAgentSettings returns the controller's settings for agents.
func (a *agentServer) GetAgentSettings(ctx context.Context, _ *pb.GetAgentSettingsRequest) (*pb.GetAgentSettingsResponse, error) {
	return &pb.GetAgentSettingsResponse{
		HookTimeoutMs:          a.s.cfg.HookTimeout.Milliseconds(),
		ControllerAddresses:    a.s.controllerAddresses(ctx),
		UpdateStatusIntervalMs: max(a.s.cfg.UpdateStatusInterval.Milliseconds(), -1),
	}, nil
}

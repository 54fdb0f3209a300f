package controller

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// progressEvery bounds how often a watch sends a response without
// changes. Such a response only advances the revision a client resumes
// after, and resuming from an older one replays only changes the client
// does not see; but a set's watch can bring many events the caller may
// not see (other machines' members of a container-scoped relation), and
// the client need not hear of each.
const progressEvery = time.Second

// progressThrottle holds back a watch's responses that carry no change,
// but for one every progressEvery, and but for one that brings the client
// to the latest barrier (mark): the client is waited on to say it has
// seen everything up to there.
type progressThrottle struct {
	last time.Time
	// sent is the revision of the last response not held back.
	sent int64
}

// hold says whether resp is to be held back, mark being the latest
// barrier's revision.
func (p *progressThrottle) hold(resp *pb.WatchResponse, mark int64) bool {
	switch {
	case resp.Relisted || len(resp.Changes) > 0:
	case mark > p.sent && resp.Revision >= mark:
	case time.Since(p.last) < progressEvery:
		return true
	default:
		p.last = time.Now()
	}
	p.sent = resp.Revision
	return false
}

// Watch streams one subject's changes from the controller's watch hub
// (package watchhub, which keeps state.Watch's contract), authorized once,
// when the stream starts. Each batch becomes one response, with the
// revision to resume after; a batch that carries no change for the caller
// (a progress report, or changes filtered out) is sent too, so that the
// client's revision advances, but at most once every progressEvery. The
// stream ends when the client goes away, with Unavailable when the
// controller stops, or with ResourceExhausted when the changes held for
// it pass its budget (watchlimit.go).
func (a *agentServer) Watch(req *pb.WatchRequest, stream pb.AgentService_WatchServer) error {
	ctx := stream.Context()
	if req.GetAfterRevision() < 0 {
		return invalid("invalid revision %d to resume after: want 0 or a revision received earlier", req.GetAfterRevision())
	}
	w, err := a.watchOf(ctx, callerFrom(ctx), req.GetSubject())
	if err != nil {
		return err
	}
	budget, end, err := a.s.watchers.open(callerFrom(ctx))
	if err != nil {
		return err
	}
	defer end()
	a.s.metrics.watchRPCs.Add(1)
	defer a.s.metrics.watchRPCs.Add(-1)
	var progress progressThrottle
	var sub *watchhub.Stream
	if w.key != "" {
		sub, err = budget.WatchKey(ctx, w.key, req.GetAfterRevision())
	} else {
		sub, err = budget.Watch(ctx, w.prefix, req.GetAfterRevision())
	}
	if err != nil {
		return watchErr(ctx, err)
	}
	defer sub.Close()
	for {
		b, err := sub.Next(ctx)
		if err != nil {
			return watchErr(ctx, err)
		}
		resp, err := w.translate(ctx, b)
		if err != nil {
			return err
		}
		if progress.hold(resp, a.s.cfg.Watches.Mark()) {
			continue
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// watchErr is the error a watch stream ends with: the client's own going
// away, or the hub's.
func watchErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, watchhub.ErrClosed) {
		return errHubStopped
	}
	if errors.Is(err, watchhub.ErrCut) {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return readErr(err, "watch")
}

// errHubStopped ends the watches of a stopping controller.
var errHubStopped = unavailable("the controller is stopping: resume the watch on another")

// watch is one subject's stream: what to watch and how to show it.
type watch struct {
	prefix string
	// trim is what a key of a set loses to become a change's id: prefix,
	// unless the watch covers only part of the set (a relation's other
	// side, whose members are still named in full).
	trim string
	// key is the one key a single-entity subject watches (with
	// state.WatchKey, so units/kv/1 does not also bring units/kv/10), ""
	// for a set.
	key string
	// id names the entity of a single-key subject.
	id string
	// value decodes an entity into a change; nil for a set of names.
	value func(ch *pb.WatchChange, v []byte) error
	// scope, when set, hides the members of a container-scoped relation
	// that are not on the caller's machine.
	scope *scopeFilter
}

// watchOf authorizes the caller to watch subject and says how.
func (a *agentServer) watchOf(ctx context.Context, c caller, subject *pb.WatchSubject) (*watch, error) {
	const verb = "watch"
	switch s := subject.GetSubject().(type) {
	case *pb.WatchSubject_Machine:
		if err := ownMachine(c, s.Machine, verb); err != nil {
			return nil, err
		}
		return single(state.MachineKey(s.Machine), s.Machine, decodeInto(func(ch *pb.WatchChange, m *pb.Machine) {
			ch.Value = &pb.WatchChange_Machine{Machine: m}
		})), nil
	case *pb.WatchSubject_MachineUnits:
		if err := ownMachine(c, s.MachineUnits, "watch the units of"); err != nil {
			return nil, err
		}
		return &watch{prefix: state.MachineUnitsPrefix(s.MachineUnits)}, nil
	case *pb.WatchSubject_Unit:
		if _, err := a.visibleUnit(ctx, c, s.Unit, verb); err != nil {
			return nil, err
		}
		return single(state.UnitKey(s.Unit), s.Unit, decodeInto(func(ch *pb.WatchChange, u *pb.Unit) {
			ch.Value = &pb.WatchChange_Unit{Unit: u}
		})), nil
	case *pb.WatchSubject_UnitSubordinates:
		if err := a.ownOrMachineUnit(ctx, c, s.UnitSubordinates, "watch the subordinates of"); err != nil {
			return nil, err
		}
		return &watch{prefix: state.SubordinatesPrefix(s.UnitSubordinates)}, nil
	case *pb.WatchSubject_Resolved:
		if err := a.ownOrMachineUnit(ctx, c, s.Resolved, "watch the resolved mark of"); err != nil {
			return nil, err
		}
		return single(state.ResolvedKey(s.Resolved), s.Resolved, decodeInto(func(ch *pb.WatchChange, r *pb.Resolved) {
			ch.Value = &pb.WatchChange_Resolved{Resolved: r}
		})), nil
	case *pb.WatchSubject_UnitTasks:
		if err := a.ownOrMachineUnit(ctx, c, s.UnitTasks, "watch the tasks of"); err != nil {
			return nil, err
		}
		return &watch{prefix: state.UnitTasksPrefix(s.UnitTasks), value: func(ch *pb.WatchChange, v []byte) error {
			ch.Value = &pb.WatchChange_Task{Task: string(v)}
			return nil
		}}, nil
	case *pb.WatchSubject_UnitRevision:
		if err := a.ownOrMachineUnit(ctx, c, s.UnitRevision, "watch the revisions of"); err != nil {
			return nil, err
		}
		return single(state.UnitRevisionKey(s.UnitRevision), s.UnitRevision, decodeInto(func(ch *pb.WatchChange, ur *pb.UnitRevision) {
			ch.Value = &pb.WatchChange_UnitRevision{UnitRevision: ur}
		})), nil
	case *pb.WatchSubject_Service:
		if err := a.serviceAllowed(ctx, c, s.Service, verb); err != nil {
			return nil, err
		}
		return single(state.ServiceKey(s.Service), s.Service, decodeInto(func(ch *pb.WatchChange, svc *pb.Service) {
			ch.Value = &pb.WatchChange_Service{Service: svc}
		})), nil
	case *pb.WatchSubject_ServiceConfig:
		if err := a.serviceAllowed(ctx, c, s.ServiceConfig, "watch the configuration of"); err != nil {
			return nil, err
		}
		return single(state.ServiceConfigKey(s.ServiceConfig), s.ServiceConfig, decodeInto(func(ch *pb.WatchChange, cfg *pb.ServiceConfig) {
			ch.Value = &pb.WatchChange_Config{Config: cfg}
		})), nil
	case *pb.WatchSubject_ServiceRelations:
		// Only the caller's own service's relations: those are the ones it
		// may enter and watch.
		if err := checkServiceName(s.ServiceRelations); err != nil {
			return nil, err
		}
		if c.kind != names.KindUnit || names.UnitService(c.id) != s.ServiceRelations {
			return nil, denied("%s may not watch the relations of service %s", c, s.ServiceRelations)
		}
		return &watch{prefix: state.ServiceRelationsPrefix(s.ServiceRelations)}, nil
	case *pb.WatchSubject_ServiceLeadership:
		if err := ownService(c, s.ServiceLeadership, "watch the leadership of"); err != nil {
			return nil, err
		}
		return &watch{prefix: state.LeadershipServicePrefix(s.ServiceLeadership), trim: state.LeadershipPrefix}, nil
	case *pb.WatchSubject_LeaderSettings:
		if err := ownService(c, s.LeaderSettings, "watch the leader settings of"); err != nil {
			return nil, err
		}
		return single(state.LeaderSettingsKey(s.LeaderSettings), s.LeaderSettings, nil), nil
	case *pb.WatchSubject_Relation:
		if _, err := a.unitRelation(ctx, c, s.Relation, verb); err != nil {
			return nil, err
		}
		id := strconv.FormatInt(s.Relation, 10)
		return single(state.RelationKey(s.Relation), id, decodeInto(func(ch *pb.WatchChange, rel *pb.Relation) {
			ch.Value = &pb.WatchChange_Relation{Relation: rel}
		})), nil
	case *pb.WatchSubject_Barrier:
		// Every agent's watches are brought to the barrier; any agent
		// may know where it is.
		if c.kind != names.KindMachine && c.kind != names.KindUnit {
			return nil, denied("%s may not watch the barrier", c)
		}
		return single(state.BarrierKey, "barrier", nil), nil
	case *pb.WatchSubject_RelationAppSettings:
		return a.watchAppSettings(ctx, c, s.RelationAppSettings)
	case *pb.WatchSubject_RelationScope:
		rel, err := a.unitRelation(ctx, c, s.RelationScope, "watch the scope of")
		if err != nil {
			return nil, err
		}
		// The caller sees the other side's members (the unit agent needs
		// no others), so that a big service related to another costs O(N)
		// events, not O(N²); in a peer relation, the whole scope.
		w := &watch{prefix: state.SettingsPrefix(s.RelationScope), trim: state.SettingsPrefix(s.RelationScope)}
		if other := otherService(rel, names.UnitService(c.id)); other != "" {
			w.prefix = state.SettingsServicePrefix(s.RelationScope, other)
		}
		if rel.Scope == pb.Scope_SCOPE_CONTAINER {
			own, err := a.unitFound(ctx, c.id)
			if err != nil {
				return nil, err
			}
			if own.MachineId == "" {
				return nil, failedPrecondition("unit %s is not assigned to a machine: it has no container to share", c.id)
			}
			w.scope = &scopeFilter{st: a.s.st, machine: own.MachineId, machines: map[string]string{}}
		}
		return w, nil
	}
	return nil, invalid("watch needs a subject")
}

// ownOrMachineUnit checks that the caller is the named unit's agent or the
// agent of the machine it is on.
func (a *agentServer) ownOrMachineUnit(ctx context.Context, c caller, name, verb string) error {
	if c.kind == names.KindMachine {
		_, err := a.machineUnit(ctx, c, name, verb)
		return err
	}
	return ownUnit(c, name, verb)
}

// otherService is the service on the other side of rel from service, ""
// in a peer relation.
func otherService(rel *pb.Relation, service string) string {
	for _, ep := range rel.Endpoints {
		if ep.Service != service {
			return ep.Service
		}
	}
	return ""
}

func single(key, id string, value func(*pb.WatchChange, []byte) error) *watch {
	return &watch{prefix: key, key: key, id: id, value: value}
}

// decodeInto returns a decoder of values of type T that set puts in a change.
func decodeInto[T any, P interface {
	*T
	proto.Message
}](set func(*pb.WatchChange, P)) func(*pb.WatchChange, []byte) error {
	return func(ch *pb.WatchChange, v []byte) error {
		var m P = new(T)
		if err := proto.Unmarshal(v, m); err != nil {
			return err
		}
		set(ch, m)
		return nil
	}
}

// trimmed is what a key of the set loses to become an id.
func (w *watch) trimmed() string {
	if w.trim != "" {
		return w.trim
	}
	return w.prefix
}

// translate turns a batch into a response.
func (w *watch) translate(ctx context.Context, b state.WatchBatch) (*pb.WatchResponse, error) {
	resp := &pb.WatchResponse{Revision: b.Revision, Relisted: b.Reset}
	evs := b.Events
	if w.key != "" {
		evs = evs[:0:0]
		for _, e := range b.Events {
			if e.Key == w.key {
				evs = append(evs, e)
			}
		}
	}
	var visible []bool
	if w.scope != nil {
		var err error
		if visible, err = w.scope.visible(ctx, w.trimmed(), b.Reset, evs); err != nil {
			return nil, err
		}
	}
	for i, e := range evs {
		if visible != nil && !visible[i] {
			continue
		}
		ch := &pb.WatchChange{Id: w.id, Version: e.ModRevision, Removed: e.Type == state.EventDelete}
		if w.key == "" {
			ch.Id = strings.TrimPrefix(e.Key, w.trimmed())
		}
		if !ch.Removed && w.value != nil {
			if err := w.value(ch, e.Value); err != nil {
				return nil, readErr(err, "decode %s at revision %d", e.Key, e.ModRevision)
			}
		}
		resp.Changes = append(resp.Changes, ch)
	}
	return resp, nil
}

// scopeFilter decides which members of a container-scoped relation's scope
// a caller on machine sees: those on the same machine. It learns a member's
// machine once per stream: at a reset from one listing of the units on the
// caller's machine (bounded by the machine, whatever the size of the
// scope), afterwards by a point read of each new member. A unit's machine
// never changes once it has one, so what it learned stays true.
type scopeFilter struct {
	st      *state.State
	machine string
	// machines maps members seen to their machines ("" when not on the
	// caller's machine and not known better), for the members now in scope.
	machines map[string]string
}

// visible reports, per event, whether the caller sees it.
//
// The member of a put it cannot place (the unit is already removed) is
// hidden: its delete follows in this stream, as a unit leaves every scope
// before it can be removed. The member of a delete it cannot place is
// shown: it may have been shown before the client resumed, and a removal
// of a name the client never saw is harmless, whereas a departure missed
// would leave a member in the client's view for ever.
func (f *scopeFilter) visible(ctx context.Context, trim string, reset bool, evs []state.Event) ([]bool, error) {
	member := func(e state.Event) string { return strings.TrimPrefix(e.Key, trim) }
	if reset {
		// The listing is the whole scope: learn the local units afresh.
		local, err := f.st.MachineUnitNames(ctx, f.machine)
		if err != nil {
			return nil, readErr(err, "list units on machine %s", f.machine)
		}
		onMachine := map[string]bool{}
		for _, u := range local {
			onMachine[u] = true
		}
		f.machines = map[string]string{}
		for _, e := range evs {
			if u := member(e); onMachine[u] {
				f.machines[u] = f.machine
			} else {
				f.machines[u] = ""
			}
		}
	}
	var unknown []string
	for _, e := range evs {
		if _, ok := f.machines[member(e)]; !ok {
			unknown = append(unknown, member(e))
		}
	}
	for len(unknown) > 0 {
		batch := unknown[:min(len(unknown), readBatch)]
		unknown = unknown[len(batch):]
		us, err := f.st.UnitsNamed(ctx, batch...)
		if err != nil {
			return nil, readErr(err, "read units %v", batch)
		}
		for i, u := range us {
			if u != nil && u.MachineId != "" {
				f.machines[batch[i]] = u.MachineId
			}
		}
	}
	out := make([]bool, len(evs))
	left := map[string]bool{}
	for i, e := range evs {
		u := member(e)
		m, known := f.machines[u]
		if e.Type == state.EventDelete {
			out[i] = !known || m == f.machine
		} else {
			out[i] = known && m == f.machine
		}
		left[u] = e.Type == state.EventDelete
	}
	// Forget those that left, so that what is kept is bounded by the scope.
	for u, gone := range left {
		if gone {
			delete(f.machines, u)
		}
	}
	return out, nil
}

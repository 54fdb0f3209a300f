package unitagent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// hookContext is what one running hook sees through the hook tools: the
// unit's relations as the agent has delivered them, its configuration as
// of the hook's start, and a buffer of its relation-set calls, committed
// only if the hook succeeds.
//
// The relation tools present one view of the relations for the whole
// hook: every unit relation-list names, and the departing unit in
// relation-departed, can be read with relation-get, and a unit's settings
// once read are what the hook reads of it again. A unit is read from the
// controller, which is fresher, while it is in the relation's scope as
// the agent last heard or the agent has not heard yet (after a restart);
// once it has left (the controller deleted its settings then), as the
// agent keeps them (kept.go): a member's as of the last relation-changed
// delivered for it (none before: empty), the unit's own as it wrote them.
type hookContext struct {
	a  *Agent
	op *hookOp
	// relations are the unit's relations: id → endpoint and the members
	// a hook of this moment may name.
	relations map[int64]*ctxRelation
	config    map[string]*pb.ConfigValue
	// machine is the unit's machine, as the controller has it.
	machine string
	// principal is a subordinate's principal unit, "" for a principal.
	principal string

	mu  sync.Mutex
	set map[int64]*settingsChange
	// appSet buffers the hook's relation-set --app calls (appsettings.go).
	appSet map[int64]*settingsChange
	// seen holds the settings the hook has read, by relation and unit.
	seen map[settingsOf]map[string]string
	// pre, in relation-joined, is the read of the joining unit's
	// settings the agent started (prefetch), which the hook's first
	// relation-get of it waits for rather than read again.
	pre *prefetch
	// opened are the unit's opened ports with the hook's changes, and
	// portsSet says the hook changed them (ports.go).
	opened   []charm.PortRange
	portsSet bool
}

// settingsOf names a unit's settings in a relation.
type settingsOf struct {
	relation int64
	unit     string
}

// ctxRelation is a relation as the hook sees it: the members the unit
// has joined (the local record's, read only until the hook's context
// ends, not copied: the record does not change while a hook runs), with
// the unit joining listed and the one departing not.
type ctxRelation struct {
	endpoint  string
	members   map[string]int64
	joining   string
	departing string
	// lr is the local record (nil in relation-created, which runs before
	// there is one); scope, the members of the scope as the agent last
	// heard, read only like members, and scoped whether it has heard
	// (the scope's watch answered).
	lr     *localRelation
	scope  map[string]int64
	scoped bool
}

func (cr *ctxRelation) has(unit string) bool {
	if unit == cr.joining {
		return true
	}
	_, ok := cr.members[unit]
	return ok && unit != cr.departing
}

func (cr *ctxRelation) list() []string {
	out := make([]string, 0, len(cr.members)+1)
	for m := range cr.members {
		if m != cr.departing && m != cr.joining {
			out = append(out, m)
		}
	}
	if cr.joining != "" {
		out = append(out, cr.joining)
	}
	sort.Strings(out)
	return out
}

// inScope says whether unit may be in the relation's scope, as far as
// the agent knows: its own unit once entered and until it leaves, another
// while the scope's watch lists it or has not answered yet (a hook in
// progress runs again after a restart before it answers).
func (cr *ctxRelation) inScope(unit string, self bool) bool {
	if self {
		return cr.lr != nil && cr.lr.InScope && !cr.lr.Left
	}
	if !cr.scoped {
		return true
	}
	_, ok := cr.scope[unit]
	return ok
}

func newHookContext(a *Agent, op *hookOp, r *modelView) *hookContext {
	hc := &hookContext{a: a, op: op, relations: map[int64]*ctxRelation{}, config: a.l.config(),
		set: map[int64]*settingsChange{}, appSet: map[int64]*settingsChange{}, seen: map[settingsOf]map[string]string{}, opened: a.l.openedPorts()}
	hc.machine = a.cfg.MachineID
	if hc.machine == "" && r.unit != nil {
		hc.machine = r.unit.MachineId
	}
	if r.unit != nil {
		hc.principal = r.unit.Principal
	}
	for id, lr := range a.l.Relations {
		cr := &ctxRelation{endpoint: lr.Endpoint, members: lr.Members, lr: lr}
		if rr := r.relations[id]; rr != nil && rr.scoped {
			cr.scope, cr.scoped = rr.members, true
		}
		hc.relations[id] = cr
	}
	if op.isRelationHook() {
		cr := hc.relations[op.Relation]
		if cr == nil { // relation-created: not recorded until it succeeds
			cr = &ctxRelation{endpoint: op.Endpoint}
			hc.relations[op.Relation] = cr
		}
		switch {
		case strings.HasSuffix(op.Hook, "-relation-joined"):
			cr.joining = op.Remote // the joining unit is listed
		case strings.HasSuffix(op.Hook, "-relation-departed"):
			cr.departing = op.Departing // the departing one is not
		}
	}
	return hc
}

// relationID is the id the tools show: "db:3".
func relationID(endpoint string, id int64) string { return endpoint + ":" + strconv.FormatInt(id, 10) }

func (hc *hookContext) relation(rid string) (int64, *ctxRelation, error) {
	ep, num, ok := strings.Cut(rid, ":")
	id, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil {
		// A bare number will do too.
		if id, err = strconv.ParseInt(rid, 10, 64); err != nil {
			return 0, nil, fmt.Errorf("invalid relation id %q: want <endpoint>:<number>", rid)
		}
		ep = ""
	}
	cr := hc.relations[id]
	if cr == nil || ep != "" && ep != cr.endpoint {
		return 0, nil, fmt.Errorf("unknown relation %q: the unit is not in it", rid)
	}
	return id, cr, nil
}

func (hc *hookContext) UnitName() string { return hc.a.cfg.Unit }

func (hc *hookContext) RelationIDs(_ context.Context, endpoint string) ([]string, error) {
	var ids []int64
	for id, cr := range hc.relations {
		if endpoint == "" || cr.endpoint == endpoint {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = relationID(hc.relations[id].endpoint, id)
	}
	return out, nil
}

func (hc *hookContext) RelationGet(ctx context.Context, rid, unit string) (map[string]string, error) {
	id, cr, err := hc.relation(rid)
	if err != nil {
		return nil, err
	}
	self := unit == hc.a.cfg.Unit
	if !self && !cr.has(unit) && unit != cr.departing {
		return nil, fmt.Errorf("unit %s is not a member of relation %s", unit, rid)
	}
	seen, err := hc.settings(ctx, id, cr, unit, self)
	if err != nil {
		return nil, fmt.Errorf("read %s's settings in %s: %w", unit, rid, err)
	}
	out := maps.Clone(seen)
	if self {
		// The hook sees its own relation-set calls at once.
		hc.mu.Lock()
		if c := hc.set[id]; c != nil {
			for k, v := range c.Set {
				out[k] = v
			}
			for _, k := range c.Unset {
				delete(out, k)
			}
		}
		hc.mu.Unlock()
	}
	return out, nil
}

// settings returns unit's settings in relation id as the hook sees them:
// read once, the same for the rest of the hook.
func (hc *hookContext) settings(ctx context.Context, id int64, cr *ctxRelation, unit string, self bool) (map[string]string, error) {
	key := settingsOf{id, unit}
	hc.mu.Lock()
	v, ok := hc.seen[key]
	hc.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := hc.read(ctx, id, cr, unit, self)
	if err != nil {
		return nil, err
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if old, ok := hc.seen[key]; ok { // read at the same time by another tool
		return old, nil
	}
	hc.seen[key] = v
	return v, nil
}

// read reads unit's settings in relation id: from the controller while
// the unit is in the scope as far as the agent knows, else (or when the
// controller finds it has left since) as the agent keeps them.
func (hc *hookContext) read(ctx context.Context, id int64, cr *ctxRelation, unit string, self bool) (map[string]string, error) {
	if cr.inScope(unit, self) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var resp *pb.ReadSettingsResponse
		var err error
		if p := hc.pre; p != nil && p.relation == id && p.unit == unit {
			p.wait(ctx)
			resp, err = p.resp, p.err
		}
		if resp == nil && status.Code(err) != codes.NotFound {
			resp, err = hc.a.cfg.API.ReadSettings(ctx, &pb.ReadSettingsRequest{Relation: id, Unit: unit})
		}
		if err == nil {
			if resp.Settings == nil {
				return map[string]string{}, nil
			}
			return resp.Settings, nil
		}
		if status.Code(err) != codes.NotFound {
			return nil, err
		}
	}
	return hc.a.kept(cr.lr, id, unit, self)
}

// kept returns unit's settings in relation id as the agent keeps them
// (lr, its record, may be nil): empty when it keeps none.
func (a *Agent) kept(lr *localRelation, id int64, unit string, self bool) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case lr == nil:
	case self:
		if lr.own != nil {
			if err := json.Unmarshal(lr.own, &out); err != nil {
				return nil, fmt.Errorf("kept settings of %s in relation %d: %w", unit, id, err)
			}
		}
	default:
		v, ok, err := a.store.keptOf(lr, id, unit)
		if err != nil {
			return nil, err
		}
		if ok {
			out = v
		}
	}
	return out, nil
}

// preset makes the hook see v as unit's settings in relation id, as the
// agent read them for it before it ran.
func (hc *hookContext) preset(id int64, unit string, v map[string]string) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.seen[settingsOf{id, unit}] = v
}

func (hc *hookContext) RelationSet(_ context.Context, rid string, set map[string]string, unset []string) error {
	return hc.bufferSettings(rid, set, unset, false)
}

// bufferSettings records a hook's changes to settings in relation rid:
// the unit's own (hc.set), or with app its service's (hc.appSet). The
// values the hook sets are part of the settings the controller would be
// asked to store: if they alone pass its limit, the commit would be
// refused after the hook, so they are refused now. (Settings held
// already count too; a commit they make too large is refused then.)
func (hc *hookContext) bufferSettings(rid string, set map[string]string, unset []string, app bool) error {
	id, cr, err := hc.relation(rid)
	if err != nil {
		return err
	}
	hc.mu.Lock()
	defer hc.mu.Unlock()
	changes, whose := hc.set, "unit"
	if app {
		changes, whose = hc.appSet, "service"
	}
	c := changes[id]
	values := map[string]string{}
	if c != nil {
		maps.Copy(values, c.Set)
	}
	maps.Copy(values, set)
	for _, k := range unset {
		delete(values, k)
	}
	if n := proto.Size(&pb.Settings{Values: values}); n > hooks.MaxSettingsBytes {
		return fmt.Errorf("the settings of this %s in %s would hold %.1f KiB: at most %d KiB",
			whose, relationID(cr.endpoint, id), float64(n)/(1<<10), hooks.MaxSettingsBytes>>10)
	}
	if c == nil {
		c = &settingsChange{Relation: id, App: app, Set: map[string]string{}}
		changes[id] = c
	}
	for k, v := range set {
		c.Set[k] = v
		c.Unset = remove(c.Unset, k)
	}
	for _, k := range unset {
		delete(c.Set, k)
		if !contains(c.Unset, k) {
			c.Unset = append(c.Unset, k)
		}
	}
	return nil
}

func remove(xs []string, x string) []string {
	out := xs[:0]
	for _, y := range xs {
		if y != x {
			out = append(out, y)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// buffered returns the hook's relation-set changes, by relation, the
// unit's before its service's.
func (hc *hookContext) buffered() []settingsChange {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	var out []settingsChange
	for _, c := range hc.set {
		out = append(out, *c)
	}
	for _, c := range hc.appSet {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Relation < out[j].Relation || out[i].Relation == out[j].Relation && !out[i].App && out[j].App
	})
	return out
}

func (hc *hookContext) RelationList(_ context.Context, rid string) ([]string, error) {
	_, cr, err := hc.relation(rid)
	if err != nil {
		return nil, err
	}
	return cr.list(), nil
}

func (hc *hookContext) Config(context.Context) (map[string]*pb.ConfigValue, error) {
	return hc.config, nil
}

func (hc *hookContext) UnitAddress(_ context.Context, kind string) (string, error) {
	switch kind {
	case "private-address", "public-address":
		return hc.a.cfg.Address, nil
	}
	return "", fmt.Errorf("unknown setting %q: want private-address or public-address", kind)
}

func (hc *hookContext) SetWorkloadStatus(ctx context.Context, st, message string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := hc.a.cfg.API.SetUnitStatus(ctx, &pb.SetUnitStatusRequest{
		Unit: hc.a.cfg.Unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD,
		Status: &pb.Status{Status: st, Message: message},
	})
	if err != nil {
		return fmt.Errorf("set status: %w", err)
	}
	hc.a.workload.Store(&pb.Status{Status: st, Message: message})
	return nil
}

func (hc *hookContext) WorkloadStatus(context.Context) (string, string, error) {
	if st := hc.a.workload.Load(); st != nil {
		return st.Status, st.Message, nil
	}
	return "unknown", "", nil
}

func (hc *hookContext) Log(level, message string) {
	l := hc.a.logger.With("hook", hc.op.Hook)
	switch strings.ToLower(level) {
	case "error":
		l.Error(message)
	case "warning", "warn":
		l.Warn(message)
	case "debug", "trace":
		l.Debug(message)
	default:
		l.Info(message)
	}
}

// setServiceStatus sends a status of the unit's service of kind (its
// status or its workload version).
func (hc *hookContext) setServiceStatus(ctx context.Context, kind pb.UnitStatusKind, st *pb.Status) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := hc.a.cfg.API.SetUnitStatus(ctx, &pb.SetUnitStatusRequest{Unit: hc.a.cfg.Unit, Kind: kind, Status: st})
	return err
}

// SetApplicationStatus sets the service's status (status-set
// --application), at once.
func (hc *hookContext) SetApplicationStatus(ctx context.Context, st, message string) error {
	if err := hc.setServiceStatus(ctx, pb.UnitStatusKind_UNIT_STATUS_KIND_SERVICE, &pb.Status{Status: st, Message: message}); err != nil {
		return fmt.Errorf("set the service's status: %w", err)
	}
	hc.a.service.Store(&pb.Status{Status: st, Message: message})
	return nil
}

// ApplicationStatus returns the service status this unit's charm last
// set, "unknown" before it set one.
func (hc *hookContext) ApplicationStatus(context.Context) (string, string, error) {
	if st := hc.a.service.Load(); st != nil {
		return st.Status, st.Message, nil
	}
	return "unknown", "", nil
}

// SetApplicationVersion records the service's workload version
// (application-version-set), at once.
func (hc *hookContext) SetApplicationVersion(ctx context.Context, version string) error {
	if err := hc.setServiceStatus(ctx, pb.UnitStatusKind_UNIT_STATUS_KIND_SERVICE_VERSION, &pb.Status{Status: version}); err != nil {
		return fmt.Errorf("set the service's version: %w", err)
	}
	return nil
}

// noteMissingTools records that hook called the Juju tools missing, which
// Lifeline does not provide: a status history entry now, and a warning in
// the idle status's message until hook runs again without them.
func (a *Agent) noteMissingTools(hook string, missing []string) {
	if len(missing) == 0 {
		if hook == a.missingHook {
			a.missingTools, a.missingHook = "", ""
		}
		return
	}
	a.missingTools = fmt.Sprintf("hook %q called %s, which Lifeline does not provide", hook, strings.Join(missing, ", "))
	a.missingHook = hook
	a.rep.set(&pb.Status{Status: "executing", Message: a.missingTools,
		Data: map[string]string{"state": a.l.State}, SyncedRevision: a.synced})
}

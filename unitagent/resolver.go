package unitagent

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// actionKind says what the agent does next.
type actionKind int

const (
	actWait       actionKind = iota // nothing to do until something changes (or until)
	actExit                         // the unit is dead or gone: the agent's work is over
	actHook                         // run (or finish) a hook: the local state's Op
	actDownload                     // fetch and unpack the charm of the unit's spec
	actFetchSpec                    // read a revision's spec: the one the unit is to run
	actDropMove                     // give up a failed move to a revision its target moved on from
	actRecord                       // record the spec's revision as the one the unit runs
	actReport                       // report the revision the unit runs to the controller
	actResolve                      // act on the operator's resolved mark
	actSetDying                     // set this unit dying: its service is
	actSubDying                     // set a subordinate dying: its principal is
	actEnterScope                   // enter a relation's scope
	actLeaveScope                   // leave a dying relation's scope
	actAddSub                       // add the subordinate of a container relation
	actRemoveSub                    // remove a dead subordinate
	actEnsureDead                   // set this unit dead
	// actHostJob is never decided: a hook operation that is a host job
	// (claims.go) is a kind of step of its own in the step protocol's
	// table (stepClasses).
	actHostJob
)

// action is the resolver's decision.
type action struct {
	kind     actionKind
	op       *hookOp // for actHook: a new operation, or nil to go on with Op
	relation int64
	unit     string
	revision int64     // for actFetchSpec: the revision to read
	adopt    bool      // for actFetchSpec: take it as the revision the unit runs
	until    time.Time // for actWait: when to look again even if nothing changes
	why      string    // for actWait: what the agent waits for, for its status
	// catchUp, for actWait, says the agent waits for its own watches to
	// answer: it is not idle, and reports nothing.
	catchUp bool
}

func (a action) String() string {
	switch a.kind {
	case actHook:
		if a.op != nil {
			return "hook " + a.op.Hook
		}
		return "hook in progress"
	case actWait:
		return "wait: " + a.why
	}
	return fmt.Sprintf("action %d %d %s", a.kind, a.relation, a.unit)
}

// cleanerGrace is how long a unit of a dying service leaves it to the
// controller's cleaner, which sets the service's units dying fifteen to a
// transaction, before it sets itself dying: one transaction a unit, each
// colliding with the cleaner's batches, was an eighth of the controller's
// work destroying 10,000 units. The unit acts itself only when no cleaner
// runs (no controller leads) for that long.
const cleanerGrace = 30 * time.Second

// decide decides what to do next from the local state and the model
// view. It is a pure function: the agent acts on its decision, records
// the result, and asks again. The order of its checks is the hook order
// charm authors rely on (docs/DESIGN.md, The unit agent).
func decide(l *localState, r *modelView, self string, now time.Time) action {
	if r.unitKnown && r.unit == nil {
		return action{kind: actExit} // removed
	}
	if r.unit != nil && r.unit.Life == pb.Life_LIFE_DEAD {
		return action{kind: actExit}
	}
	if op := l.Op; op != nil && isMoveHook(op) && op.Step != stepDone && (op.Attempts > 0 || l.inError()) &&
		r.revSeen && r.unitRev != nil && r.unitRev.Target != op.Version {
		// A failed move to a revision the unit is no longer to run (an
		// abort or an auto-revert made a newer target) does not hold the
		// unit back from the newer one, in error or not.
		return action{kind: actDropMove}
	}
	if l.inError() {
		if r.resolved != pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
			return action{kind: actResolve}
		}
		return action{kind: actWait, why: "resolved"}
	}
	if l.Spec == nil {
		// Every hook may read the configuration (config-get), its spec's:
		// none runs, not even one in progress before a restart, until the
		// agent holds it. A new unit reads its target's; an agent that
		// ran before revisions takes its unit's current one as the one it
		// runs (config-changed runs again).
		if !r.revSeen || r.unitRev == nil {
			return action{kind: actWait, why: "the unit's revision", catchUp: true}
		}
		if l.State == StateNew {
			return action{kind: actFetchSpec, revision: r.unitRev.Target}
		}
		return action{kind: actFetchSpec, revision: r.unitRev.Current, adopt: true}
	}
	if op := l.Op; op != nil {
		if l.retrying() && r.resolved != pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
			// The operator answered the failure before the retries ran
			// out: run it again now, or count it done.
			return action{kind: actResolve}
		}
		if op.Step == stepQueued && now.Before(op.NotBefore) {
			return action{kind: actWait, until: op.NotBefore, why: "retry of " + op.Hook}
		}
		return action{kind: actHook}
	}
	if r.unit == nil || !r.serviceSeen || r.service == nil {
		return action{kind: actWait, why: "the unit and its service", catchUp: true}
	}
	u := r.unit
	dying := u.Life != pb.Life_LIFE_ALIVE
	if !dying && r.service.Life != pb.Life_LIFE_ALIVE {
		if until := r.serviceDyingSince.Add(cleanerGrace); now.Before(until) {
			return action{kind: actWait, until: until, why: "the cleaner to set the unit dying with its service"}
		}
		return action{kind: actSetDying}
	}
	if !dying && u.Principal != "" && lostPrincipal(r, u) {
		// A subordinate goes with the container relation that made it.
		return action{kind: actSetDying}
	}
	if l.State == StateNew {
		if dying {
			// Nothing was installed: nothing to undo.
			return dyingEnd(l, r)
		}
		if a, ok := fetchAction(l, r); ok {
			return a
		}
		if l.Charm != charmKey(l.Spec.decoded().GetCharm()) {
			return action{kind: actDownload}
		}
		if a, ok := hostOpBefore(l, "install"); ok {
			return a
		}
		return hook(&hookOp{Hook: "install"})
	}
	if dying {
		for _, name := range sortedSubs(r) {
			if s := r.subs[name]; s != nil && s.Life == pb.Life_LIFE_ALIVE {
				return action{kind: actSubDying, unit: name}
			}
		}
	}
	if !dying {
		// A move's new charm comes first: no other hook runs from it
		// before its upgrade-charm.
		if a, ok := fetchAction(l, r); ok {
			return a
		}
		if l.Charm != charmKey(l.Spec.decoded().GetCharm()) {
			return action{kind: actDownload}
		}
		if l.Upgrade {
			if a, ok := hostOpBefore(l, "upgrade-charm"); ok {
				return a
			}
			return hook(&hookOp{Hook: "upgrade-charm", Version: l.Spec.Revision})
		}
	}
	if a, ok := relationAction(l, r, self, dying); ok {
		return a
	}
	if !r.relsKnown || !relationsKnown(r) {
		// relation-created of the relations the service is in runs
		// before config-changed and start: each relation's watches must
		// have answered before they run.
		return action{kind: actWait, why: "the service's relations and configuration", catchUp: true}
	}
	if dying {
		return dyingEnd(l, r)
	}
	if a, ok := removeDeadSub(r); ok {
		// A subordinate that went without its principal (its service or
		// its container relation destroyed) is the principal's to remove
		// (U5), whether the principal is dying or not.
		return a
	}
	if a, ok := leadershipAction(l, r, self); ok {
		return a
	}
	if l.ConfigRan != l.Spec.configDigest() {
		if a, ok := hostOpBefore(l, "config-changed"); ok {
			return a
		}
		return hook(&hookOp{Hook: "config-changed", Version: l.Spec.Revision})
	}
	if a, ok := hostOpBefore(l, "record"); ok {
		return a
	}
	if l.Revision != l.Spec.Revision {
		return action{kind: actRecord}
	}
	if !l.Started {
		return hook(&hookOp{Hook: "start"})
	}
	if ur := r.unitRev; ur != nil && ur.Current != l.Revision && ur.Target == l.Revision {
		return action{kind: actReport}
	}
	return updateStatusAction(r, now)
}

// removeDeadSub removes the first dead subordinate, in name order, once
// the principal knows its subordinates.
func removeDeadSub(r *modelView) (action, bool) {
	if !r.subsKnown {
		return action{}, false
	}
	for _, name := range sortedSubs(r) {
		if s := r.subs[name]; s != nil && s.Life == pb.Life_LIFE_DEAD {
			return action{kind: actRemoveSub, unit: name}, true
		}
	}
	return action{}, false
}

// fetchAction reads the spec of the unit's target when it is not the
// one the agent holds.
func fetchAction(l *localState, r *modelView) (action, bool) {
	if !r.revSeen || r.unitRev == nil {
		return action{kind: actWait, why: "the unit's revision", catchUp: true}, true
	}
	if t := r.unitRev.Target; t != l.Spec.Revision {
		return action{kind: actFetchSpec, revision: t}, true
	}
	return action{}, false
}

// relationsKnown says whether the watches of every relation the service
// is in, and of its scope, have answered.
func relationsKnown(r *modelView) bool {
	for id := range r.relationIDs {
		if rr := r.relations[id]; rr == nil || !rr.known || !rr.scoped {
			return false
		}
	}
	return true
}

func hook(op *hookOp) action {
	op.Step = stepQueued
	return action{kind: actHook, op: op}
}

func charmKey(c *pb.CharmRef) string { return fmt.Sprintf("%s/%d", c.GetName(), c.GetRevision()) }

func sortedSubs(r *modelView) []string {
	names := make([]string, 0, len(r.subs))
	for n := range r.subs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// dyingEnd is the dying unit's way out once it has left every relation:
// its subordinates gone, then stop, remove, and dead.
func dyingEnd(l *localState, r *modelView) action {
	if len(l.Relations) > 0 {
		return action{kind: actWait, why: "its relations to be departed"}
	}
	if !r.subsKnown {
		return action{kind: actWait, why: "its subordinates"}
	}
	if a, ok := removeDeadSub(r); ok {
		return a
	}
	if len(r.subs) > 0 {
		return action{kind: actWait, why: "its subordinates to be gone"}
	}
	if l.State != StateNew && l.Started {
		return hook(&hookOp{Hook: "stop"})
	}
	if hostReleaseDue(l) {
		return hostAction(opHostRelease, 0)
	}
	if l.State != StateNew {
		if !l.Removed {
			return hook(&hookOp{Hook: "remove"})
		}
	}
	return action{kind: actEnsureDead}
}

// relationAction decides the next step in the unit's relations, if any:
// relation-created and entering the scope of new relations, the member
// hooks of relations it is in, and departing, leaving and breaking those
// that are dying (all of them when the unit is).
func relationAction(l *localState, r *modelView, self string, dying bool) (action, bool) {
	ids := map[int64]bool{}
	for id := range l.Relations {
		ids[id] = true
	}
	for id := range r.relationIDs {
		ids[id] = true
	}
	sorted := make([]int64, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })

	// Within a relation, relation-changed follows relation-joined for the
	// same unit before any other hook of that relation.
	for _, id := range sorted {
		if lr, rr := l.Relations[id], r.relations[id]; lr != nil && !lr.Left && rr != nil {
			if m, v, ok := firstJoinedUnchanged(rr, lr); ok {
				return hook(relHook(lr, id, "changed", m, v)), true
			}
		}
	}
	for _, id := range sorted {
		rr := r.relations[id]
		lr := l.Relations[id]
		if rr == nil || !rr.known || !rr.scoped {
			if lr == nil || !r.relsKnown {
				continue // not known enough yet to act on
			}
		}
		gone := r.relsKnown && !r.relationIDs[id] || rr != nil && rr.known && rr.rel == nil
		relDying := dying || gone || rr != nil && rr.rel != nil && rr.rel.Life != pb.Life_LIFE_ALIVE
		if lr == nil {
			if relDying || rr == nil || rr.rel == nil {
				continue
			}
			ep := ownEndpoint(rr.rel, r.unit.Service)
			if ep == "" {
				continue
			}
			return hook(&hookOp{Hook: ep + "-relation-created", Relation: id, Endpoint: ep}), true
		}
		if !relDying {
			if !lr.InScope {
				return action{kind: actEnterScope, relation: id}, true
			}
			if sub := subordinateService(rr.rel, r.unit); sub != "" && l.AddedSubordinates[id] == "" {
				// One the controller refused is asked for again once its
				// time comes (Agent.Run forgets the refusal then), and
				// holds nothing back meanwhile.
				if _, refused := l.SubordinatesRefused[id]; !refused {
					return action{kind: actAddSub, relation: id, unit: sub}, true
				}
			}
			if !l.Started {
				continue // member hooks wait for start
			}
			if rr == nil || !rr.scoped {
				// The scope's watch has not answered yet (a restarted
				// agent): an empty picture is not an empty scope, and
				// departing the members joined before would be wrong.
				continue
			}
			if kind, m, v, ok := nextMemberHook(rr, lr, self); ok {
				return hook(relHook(lr, id, kind, m, v)), true
			}
			// A peer relation's leader wrote its own service's settings:
			// as in Juju, only the other units hear of them.
			if svc, v, ok := appChanged(rr, lr, r.unit.Service); ok && (svc != r.unit.Service || r.leader != self) {
				return hook(&hookOp{Hook: lr.Endpoint + "-relation-changed", Relation: id, Endpoint: lr.Endpoint, RemoteService: svc, Version: v}), true
			}
			continue
		}
		// The relation is dying (or the unit is): depart every member,
		// leave the scope, then relation-broken, once, last. A unit that
		// never tried to enter has nothing to leave; one that tried may
		// have entered (its call's answer lost to a crash, or the record
		// of it) and leaves.
		if !lr.Left {
			if m, ok := firstMember(lr); ok {
				return hook(relHook(lr, id, "departed", m, 0)), true
			}
			if lr.InScope || lr.Entering {
				return action{kind: actLeaveScope, relation: id}, true
			}
		}
		return hook(&hookOp{Hook: lr.Endpoint + "-relation-broken", Relation: id, Endpoint: lr.Endpoint}), true
	}
	return action{}, false
}

// appChanged returns the remote service of relation rr (the unit's own
// service, in a peer relation) and the version of its settings there
// (relation-set --app) when relation-changed has not run for that
// version: Juju runs it, with no remote unit, after the member hooks due.
// The caller skips it on a peer relation's leader.
func appChanged(rr *relationView, lr *localRelation, service string) (string, int64, bool) {
	if rr.rel == nil || !rr.appsKnown {
		return "", 0, false
	}
	remote := service
	for _, ep := range rr.rel.Endpoints {
		if ep.Service != service {
			remote = ep.Service
		}
	}
	v := rr.apps[remote]
	return remote, v, v != 0 && v != lr.App
}

func relHook(lr *localRelation, id int64, kind, unit string, version int64) *hookOp {
	op := &hookOp{Hook: lr.Endpoint + "-relation-" + kind, Relation: id, Endpoint: lr.Endpoint, Remote: unit, Version: version}
	if kind == "departed" {
		op.Departing = unit
	}
	return op
}

// pendingOf returns the index of rr's members whose hooks may be due
// (memberView.pending), seeded with every member of both sides when lr is
// a record of the relation it has not seen (the agent's first look, or a
// relation created anew).
func pendingOf(rr *relationView, lr *localRelation) map[string]struct{} {
	v := rr.view
	if v == nil { // a picture not made by snapshot
		v = &memberView{members: rr.members}
		rr.view = v
	}
	if v.seeded != lr || v.pending == nil {
		v.pending = make(map[string]struct{}, len(lr.Members)+len(rr.members))
		for m := range lr.Members {
			v.pending[m] = struct{}{}
		}
		for m := range rr.members {
			v.pending[m] = struct{}{}
		}
		v.seeded = lr
	}
	return v.pending
}

// firstJoinedUnchanged returns the first member (by name) that joined but
// has had no relation-changed yet, while the scope still lists it, with
// its version there: relation-changed follows relation-joined before any
// other hook of the relation. It looks at those members alone
// (localRelation.joinedUnchanged): looking through the pending members,
// as it did, passed over every member of a dying relation at each of its
// departures, which nothing else looks at there (3.6 s of CPU for a unit
// departing 10,000).
func firstJoinedUnchanged(rr *relationView, lr *localRelation) (string, int64, bool) {
	var best string
	var bestV int64
	found := false
	for m := range lr.joinedUnchanged() {
		if v, ok := rr.members[m]; ok && (!found || m < best) {
			best, bestV, found = m, v, true
		}
	}
	return best, bestV, found
}

// nextMemberHook returns the member hook due next in an alive relation
// the unit is in, in the order charm authors rely on: departures first,
// then joins, then changes, each by member name. It looks only at the
// pending members, dropping those found up to date.
func nextMemberHook(rr *relationView, lr *localRelation, self string) (kind, unit string, version int64, ok bool) {
	own := names.UnitService(self)
	peer := rr.rel != nil && len(rr.rel.Endpoints) == 1
	const (
		none = iota
		changed
		joined
		departed
	)
	rank, best, bestV := none, "", int64(0)
	pending := pendingOf(rr, lr)
	for m := range pending {
		lv, local := lr.Members[m]
		rv, remote := rr.members[m]
		remote = remote && m != self && (peer || names.UnitService(m) != own)
		r := none
		switch {
		case local && !remote:
			r = departed
		case !local && remote:
			r = joined
		case local && remote && lv != rv:
			r = changed
		}
		if r == none {
			delete(pending, m) // up to date
			continue
		}
		if r > rank || r == rank && m < best {
			rank, best, bestV = r, m, rv
		}
	}
	switch rank {
	case departed:
		return "departed", best, 0, true
	case joined:
		return "joined", best, 0, true
	case changed:
		return "changed", best, bestV, true
	}
	return "", "", 0, false
}

// firstMember returns the first of lr's members by name. A unit related
// to 10,000 departing ones looked through all that were left for each
// departure (4.3 s of its CPU destroying the harness's model without
// hooks); it now sorts them once (lr.byName).
func firstMember(lr *localRelation) (string, bool) {
	if lr.byName == nil {
		lr.byName = slices.Sorted(maps.Keys(lr.Members))
	}
	for len(lr.byName) > 0 {
		if _, ok := lr.Members[lr.byName[0]]; ok {
			return lr.byName[0], true
		}
		lr.byName = lr.byName[1:]
	}
	return "", false
}

// ownEndpoint is the name of the relation's endpoint on service's side.
func ownEndpoint(rel *pb.Relation, service string) string {
	for _, ep := range rel.Endpoints {
		if ep.Service == service {
			return ep.Endpoint.Name
		}
	}
	return ""
}

// lostPrincipal says whether subordinate u is in no alive container-scoped
// relation with its principal's service any more, as far as every one of
// its relations' watches has told.
func lostPrincipal(r *modelView, u *pb.Unit) bool {
	if !r.relsKnown {
		return false
	}
	principal := names.UnitService(u.Principal)
	for id := range r.relationIDs {
		rr := r.relations[id]
		if rr == nil || !rr.known {
			return false
		}
		if rel := rr.rel; rel != nil && rel.Life == pb.Life_LIFE_ALIVE && rel.Scope == pb.Scope_SCOPE_CONTAINER {
			for _, ep := range rel.Endpoints {
				if ep.Service == principal {
					return false
				}
			}
		}
	}
	return true
}

// subordinateService returns the subordinate service this principal unit
// must have a unit of, when rel is a container-scoped relation between its
// service and a subordinate one; else "".
func subordinateService(rel *pb.Relation, u *pb.Unit) string {
	if rel == nil || rel.Scope != pb.Scope_SCOPE_CONTAINER || u.Principal != "" || len(rel.Endpoints) != 2 {
		return ""
	}
	for _, ep := range rel.Endpoints {
		if ep.Service != u.Service && ep.Subordinate {
			return ep.Service
		}
	}
	return ""
}

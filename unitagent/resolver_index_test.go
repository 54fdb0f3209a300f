package unitagent

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The resolver looks only at the members not yet up to date
// (memberView.pending) where it once sorted every member at every
// decision. Driven through random scope changes, relisted scopes,
// relations created anew and hooks committed, it must decide exactly as
// the plain version below (the resolver before the index) does.
func TestMemberIndexDecidesAsTheFullScan(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		for _, peer := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed %d peer %v", seed, peer), func(t *testing.T) {
				checkMemberIndex(t, rand.New(rand.NewPCG(seed, 7)), peer)
			})
		}
	}
}

func checkMemberIndex(t *testing.T, rnd *rand.Rand, peer bool) {
	const self = "front/0"
	rel := &pb.Relation{Id: 1, Life: pb.Life_LIFE_ALIVE, Endpoints: []*pb.RelationEndpoint{
		{Service: "front", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "bench", Endpoint: &pb.Endpoint{Name: "db"}}}}
	units := []string{"bench/0", "bench/1", "bench/2", "bench/3", "bench/10", "bench/11", "front/0", "front/1"}
	if peer {
		rel.Endpoints = rel.Endpoints[:1]
		units = []string{"front/0", "front/1", "front/2", "front/3", "front/10", "front/11"}
	}
	w := &watcher{logger: hclog.NewNullLogger(), views: map[int64]*memberView{}, r: &modelView{
		unit: &pb.Unit{Name: self, Service: names.UnitService(self), Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{1: true}, relsKnown: true,
		relations: map[int64]*relationView{1: {rel: rel, known: true, members: map[string]int64{}, changed: map[string]struct{}{}}},
	}}
	l := newLocalState()
	l.State, l.Started = StateRunning, true
	l.createRelation(1, "db")
	l.Relations[1].InScope = true
	version := int64(100)
	for step := 0; step < 3000; step++ {
		rr := w.r.relations[1]
		switch p := rnd.IntN(100); {
		case p < 40: // a member enters, changes or leaves the scope
			u := units[rnd.IntN(len(units))]
			ch := &pb.WatchChange{Id: u}
			if _, in := rr.members[u]; in && rnd.IntN(3) == 0 {
				ch.Removed = true
			} else {
				version++
				ch.Version = version
			}
			rr.applyScope(&pb.WatchResponse{Changes: []*pb.WatchChange{ch}})
		case p < 42: // the scope listed afresh
			resp := &pb.WatchResponse{Relisted: true}
			for _, u := range units {
				if rnd.IntN(2) == 0 {
					version++
					resp.Changes = append(resp.Changes, &pb.WatchChange{Id: u, Version: version})
				}
			}
			rr.applyScope(resp)
		case p < 43: // the relation created anew (as after a restart, a new record)
			l.createRelation(1, "db")
			l.Relations[1].InScope = true
		default: // decide, and commit the hook as the executor does
			r := w.snapshotLocked()
			for _, dying := range []bool{true, false} {
				want, wantOK := plainRelationAction(l, copyPicture(r), self, dying)
				got, gotOK := relationAction(l, r, self, dying)
				if gotOK != wantOK || describe(got) != describe(want) {
					t.Fatalf("step %d (dying %v): decided %v %s, the full scan %v %s\nlocal %v\nremote %v",
						step, dying, gotOK, describe(got), wantOK, describe(want), l.Relations[1].Members, r.relations[1].members)
				}
				if dying || !gotOK || got.kind != actHook {
					continue
				}
				switch op := got.op; op.Hook {
				case "db-relation-joined":
					l.setMember(1, op.Remote, 0, nil)
				case "db-relation-changed":
					l.setMember(1, op.Remote, op.Version, nil)
				case "db-relation-departed":
					l.departMember(1, op.Remote)
				}
			}
		}
	}
}

func describe(a action) string {
	if a.op == nil {
		return a.String()
	}
	return fmt.Sprintf("%s %s %d", a.op.Hook, a.op.Remote, a.op.Version)
}

// copyPicture copies r's relations and their members.
func copyPicture(r *modelView) *modelView {
	c := *r
	c.relations = map[int64]*relationView{}
	for id, rr := range r.relations {
		cr := *rr
		cr.members = map[string]int64{}
		for u, v := range rr.members {
			cr.members[u] = v
		}
		cr.view = nil
		c.relations[id] = &cr
	}
	return &c
}

// plainRelationAction is relationAction as it was before the member
// index: every decision sorts every member.
func plainRelationAction(l *localState, r *modelView, self string, dying bool) (action, bool) {
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
		if lr := l.Relations[id]; lr != nil && !lr.Left {
			for _, m := range plainSortedMembers(lr.Members) {
				if lr.Members[m] == 0 {
					if v, ok := r.relations[id].plainMemberVersion(m); ok {
						return hook(relHook(lr, id, "changed", m, v)), true
					}
				}
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
				return action{kind: actAddSub, relation: id, unit: sub}, true
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
			members := plainRemoteMembers(rr, self)
			for _, m := range plainSortedMembers(lr.Members) {
				if _, ok := members[m]; !ok {
					return hook(relHook(lr, id, "departed", m, 0)), true
				}
			}
			for _, m := range plainSortedMembers(members) {
				if _, ok := lr.Members[m]; !ok {
					return hook(relHook(lr, id, "joined", m, 0)), true
				}
			}
			for _, m := range plainSortedMembers(members) {
				if v := members[m]; v != lr.Members[m] {
					return hook(relHook(lr, id, "changed", m, v)), true
				}
			}
			continue
		}
		// The relation is dying (or the unit is): depart every member,
		// leave the scope, then relation-broken, once, last. A unit that
		// never entered has nothing to leave.
		if !lr.Left {
			for _, m := range plainSortedMembers(lr.Members) {
				return hook(relHook(lr, id, "departed", m, 0)), true
			}
			if lr.InScope {
				return action{kind: actLeaveScope, relation: id}, true
			}
		}
		return hook(&hookOp{Hook: lr.Endpoint + "-relation-broken", Relation: id, Endpoint: lr.Endpoint}), true
	}
	return action{}, false
}

func (rr *relationView) plainMemberVersion(unit string) (int64, bool) {
	if rr == nil {
		return 0, false
	}
	v, ok := rr.members[unit]
	return v, ok
}

// remoteMembers are the units in the relation's scope on its other side:
// the other service's units, or in a peer relation the other units of the
// unit's own service.
func plainRemoteMembers(rr *relationView, self string) map[string]int64 {
	own := names.UnitService(self)
	peer := rr.rel != nil && len(rr.rel.Endpoints) == 1
	out := map[string]int64{}
	for u, v := range rr.members {
		if u != self && (peer || names.UnitService(u) != own) {
			out[u] = v
		}
	}
	return out
}

func plainSortedMembers(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for u := range m {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// BenchmarkDecision is one decision of the front unit of N related units
// with half of them joined: a snapshot (one member changed since the last)
// and the resolver's choice, then the hook committed.
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) { benchmarkDecision(b, n, relationAction) })
		b.Run(fmt.Sprintf("members=%d/full-scan", n), func(b *testing.B) {
			// as before the index: the whole picture copied, every member sorted
			benchmarkDecision(b, n, func(l *localState, r *modelView, self string, dying bool) (action, bool) {
				return plainRelationAction(l, copyPicture(r), self, dying)
			})
		})
	}
}

func benchmarkDecision(b *testing.B, n int, decide func(*localState, *modelView, string, bool) (action, bool)) {
	const self = "front/0"
	rel := &pb.Relation{Id: 1, Life: pb.Life_LIFE_ALIVE, Endpoints: []*pb.RelationEndpoint{
		{Service: "front", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "bench", Endpoint: &pb.Endpoint{Name: "db"}}}}
	rr := &relationView{rel: rel, known: true, members: map[string]int64{}, changed: map[string]struct{}{}}
	w := &watcher{logger: hclog.NewNullLogger(), views: map[int64]*memberView{}, r: &modelView{
		unit: &pb.Unit{Name: self, Service: "front", Life: pb.Life_LIFE_ALIVE}, unitKnown: true,
		relationIDs: map[int64]bool{1: true}, relsKnown: true, relations: map[int64]*relationView{1: rr},
	}}
	l := newLocalState()
	l.State, l.Started = StateRunning, true
	l.createRelation(1, "db")
	l.Relations[1].InScope = true
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("bench/%d", i)
		rr.applyScope(&pb.WatchResponse{Changes: []*pb.WatchChange{{Id: u, Version: int64(10 + i)}}})
		if i%2 == 0 {
			l.setMember(1, u, int64(10+i), nil)
		}
	}
	w.snapshotLocked()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		u := fmt.Sprintf("bench/%d", i%n)
		rr.applyScope(&pb.WatchResponse{Changes: []*pb.WatchChange{{Id: u, Version: int64(n + 10 + i)}}})
		r := w.snapshotLocked()
		act, ok := decide(l, r, self, false)
		if !ok || act.op == nil {
			b.Fatalf("no hook decided: %v", act)
		}
		commitMemberHook(l, act.op)
	}
}

// commitMemberHook records in l what relation 1's member hook op did, as
// the agent does once the hook ran, and drops l's record of changes.
func commitMemberHook(l *localState, op *hookOp) {
	switch op.Hook {
	case "db-relation-joined":
		l.setMember(1, op.Remote, 0, nil)
	case "db-relation-changed":
		l.setMember(1, op.Remote, op.Version, nil)
	}
	l.changes = l.changes[:0]
}

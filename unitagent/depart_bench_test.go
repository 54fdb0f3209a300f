package unitagent

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// benchDying returns a unit front/0 in relation 1 with n members, which
// is dying and whose scope the members are leaving, as in a destroy.
func benchDying(n int) (*watcher, *localState) {
	rel := &pb.Relation{Id: 1, Life: pb.Life_LIFE_DYING, Endpoints: []*pb.RelationEndpoint{
		{Service: "front", Endpoint: &pb.Endpoint{Name: "db"}}, {Service: "bench", Endpoint: &pb.Endpoint{Name: "db"}}}}
	rr := &relationView{rel: rel, known: true, scoped: true, members: map[string]int64{}, changed: map[string]struct{}{}}
	w := &watcher{logger: hclog.NewNullLogger(), views: map[int64]*memberView{}, r: &modelView{
		unit: &pb.Unit{Name: "front/0", Service: "front", Life: pb.Life_LIFE_DYING}, unitKnown: true,
		relationIDs: map[int64]bool{1: true}, relsKnown: true, relations: map[int64]*relationView{1: rr},
	}}
	l := newLocalState()
	l.State, l.Started = StateRunning, true
	l.createRelation(1, "db")
	l.Relations[1].InScope = true
	for i := range n {
		u := fmt.Sprintf("bench/%d", i)
		rr.members[u] = 1
		rr.changed[u] = struct{}{}
		l.setMember(1, u, 1, nil)
	}
	l.changes = nil
	return w, l
}

// departAll departs every member as the agent's loop does, the members
// leaving the scope meanwhile, and returns the departures.
func departAll(tb testing.TB, w *watcher, l *localState) []string {
	var departed []string
	for {
		r := w.snapshotLocked()
		a, ok := relationAction(l, r, "front/0", true)
		if !ok || a.kind != actHook || a.op.Hook != "db-relation-departed" {
			return departed
		}
		departed = append(departed, a.op.Remote)
		l.departMember(1, a.op.Remote)
		l.changes = l.changes[:0]
		w.r.relations[1].applyScope(&pb.WatchResponse{Changes: []*pb.WatchChange{{Id: a.op.Remote, Removed: true}}})
	}
}

// A dying unit departs its members in name order, each once, and a
// member joined meanwhile is departed in its turn.
func TestDepartsEveryMemberInNameOrder(t *testing.T) {
	w, l := benchDying(30)
	r := w.snapshotLocked()
	a, _ := relationAction(l, r, "front/0", true)
	if a.op == nil || a.op.Remote != "bench/0" {
		t.Fatalf("first decision %s, want bench/0 departed", describe(a))
	}
	l.departMember(1, "bench/0")
	l.setMember(1, "bench/15a", 1, nil) // recorded late (a replayed join, say)
	got := departAll(t, w, l)
	if len(got) != 30 || got[0] != "bench/1" || got[6] != "bench/15" || got[7] != "bench/15a" || got[29] != "bench/9" {
		t.Errorf("departed %v", got)
	}
}

func BenchmarkDepart10000Members(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		w, l := benchDying(10000)
		b.StartTimer()
		if n := len(departAll(b, w, l)); n != 10000 {
			b.Fatalf("%d departed", n)
		}
	}
}

// BenchmarkJoin10000Members has a unit's scope gain 10,000 members one
// after another, each joined and changed as the agent's loop does.
func BenchmarkJoin10000Members(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		w, l := benchDying(0)
		w.r.unit.Life = pb.Life_LIFE_ALIVE
		rr := w.r.relations[1]
		rr.rel.Life = pb.Life_LIFE_ALIVE
		b.StartTimer()
		hooks := 0
		for i := range 10000 {
			rr.applyScope(&pb.WatchResponse{Changes: []*pb.WatchChange{{Id: fmt.Sprintf("bench/%d", i), Version: 7}}})
			for {
				a, ok := relationAction(l, w.snapshotLocked(), "front/0", false)
				if !ok || a.kind != actHook {
					break
				}
				hooks++
				commitMemberHook(l, a.op)
			}
		}
		if hooks != 20000 {
			b.Fatalf("%d hooks, want 20000", hooks)
		}
	}
}

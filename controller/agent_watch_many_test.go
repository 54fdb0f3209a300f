package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// manyStream is one open WatchMany stream.
type manyStream struct {
	t      *testing.T
	stream pb.AgentService_WatchManyClient
	// pending are the responses received, not yet asked for, by id; all
	// every response received, in order.
	pending map[int64][]*pb.WatchManyResponse
	all     []*pb.WatchManyResponse
}

func (m *agentModel) watchMany(tag string) *manyStream {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	m.t.Cleanup(cancel)
	stream, err := m.as(tag).WatchMany(ctx)
	if err != nil {
		m.t.Fatalf("WatchMany as %s: %v", tag, err)
	}
	return &manyStream{t: m.t, stream: stream, pending: map[int64][]*pb.WatchManyResponse{}}
}

func (s *manyStream) subscribe(id int64, subject *pb.WatchSubject, after int64) {
	s.t.Helper()
	if err := s.stream.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{Id: id, Subject: subject, AfterRevision: after}}}); err != nil {
		s.t.Fatalf("subscribe %d: %v", id, err)
	}
}

func (s *manyStream) unsubscribe(id int64) {
	s.t.Helper()
	if err := s.stream.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Unsubscribe{Unsubscribe: &pb.WatchUnsubscribe{Id: id}}}); err != nil {
		s.t.Fatalf("unsubscribe %d: %v", id, err)
	}
}

// next returns id's next response that ends it, resets or changes
// something, skipping progress.
func (s *manyStream) next(id int64) *pb.WatchManyResponse {
	s.t.Helper()
	for {
		for len(s.pending[id]) > 0 {
			resp := s.pending[id][0]
			s.pending[id] = s.pending[id][1:]
			if w := resp.GetWatch(); w != nil && !w.Relisted && len(w.Changes) == 0 {
				continue
			}
			return resp
		}
		resp, err := s.stream.Recv()
		if err != nil {
			s.t.Fatalf("WatchMany Recv, waiting for subscription %d: %v", id, err)
		}
		s.all = append(s.all, resp)
		s.pending[resp.Id] = append(s.pending[resp.Id], resp)
	}
}

// wantEnd is a subscription's end as a test expects it: its code, and
// words its message has.
type wantEnd struct {
	id   int64
	code codes.Code
	msg  string
}

// wantEnds checks that each subscription ends as expected, skipping what
// it sent before its end.
func (s *manyStream) wantEnds(ends []wantEnd) {
	s.t.Helper()
	for _, w := range ends {
		resp := s.next(w.id)
		for resp.GetWatch() != nil {
			resp = s.next(w.id)
		}
		end := resp.GetEnd()
		if codes.Code(end.GetCode()) != w.code || !strings.Contains(end.GetMessage(), w.msg) {
			s.t.Errorf("subscription %d: end %v, want %v %q", w.id, end, w.code, w.msg)
		}
	}
}

// nextWatch is next, which must not be an end.
func (s *manyStream) nextWatch(id int64) *pb.WatchResponse {
	s.t.Helper()
	resp := s.next(id)
	if resp.GetWatch() == nil {
		s.t.Fatalf("subscription %d ended: %v", id, resp.GetEnd())
	}
	return resp.GetWatch()
}

// TestAgentWatchManyServesEachSubjectAsWatch subscribes on one stream to
// what a unit agent watches, and compares every subscription's listing
// and next change with those of Watch.
func TestAgentWatchManyServesEachSubjectAsWatch(t *testing.T) {
	m := newAgentModel(t)
	subject := func(s any) *pb.WatchSubject { return watchSubject(s) }
	cases := []struct {
		as       string
		subjects []*pb.WatchSubject
	}{
		{"unit-kv/0", []*pb.WatchSubject{
			subject(&pb.WatchSubject_Unit{Unit: "kv/0"}),
			subject(&pb.WatchSubject_Resolved{Resolved: "kv/0"}),
			subject(&pb.WatchSubject_UnitSubordinates{UnitSubordinates: "kv/0"}),
			subject(&pb.WatchSubject_Service{Service: "kv"}),
			subject(&pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}),
			subject(&pb.WatchSubject_ServiceRelations{ServiceRelations: "kv"}),
			subject(&pb.WatchSubject_Relation{Relation: m.global}),
			subject(&pb.WatchSubject_RelationScope{RelationScope: m.global}),
			subject(&pb.WatchSubject_RelationScope{RelationScope: m.kvPeer}),
		}},
		{"unit-logger/1", []*pb.WatchSubject{
			subject(&pb.WatchSubject_Unit{Unit: "app/1"}),
			subject(&pb.WatchSubject_RelationScope{RelationScope: m.container}),
		}},
		{"machine-0", []*pb.WatchSubject{
			subject(&pb.WatchSubject_Machine{Machine: "0"}),
			subject(&pb.WatchSubject_MachineUnits{MachineUnits: "0"}),
		}},
	}
	type pair struct {
		subject *pb.WatchSubject
		watch   *agentWatcher
		many    *manyStream
		id      int64
	}
	var pairs []pair
	for _, c := range cases {
		many := m.watchMany(c.as)
		for i, s := range c.subjects {
			id := int64(i + 1)
			many.subscribe(id, s, 0)
			pairs = append(pairs, pair{subject: s, watch: m.watch(c.as, s, 0), many: many, id: id})
		}
	}
	for _, p := range pairs {
		want, got := p.watch.next(), p.many.nextWatch(p.id)
		if got.Relisted != want.Relisted || !slices.Equal(changeList(got, true), changeList(want, true)) {
			t.Errorf("WatchMany first response for %v = reset %v, %v; Watch's = reset %v, %v",
				p.subject, got.Relisted, changeList(got, true), want.Relisted, changeList(want, true))
		}
	}

	// Changes for some subjects: each reaches WatchMany's subscription as
	// it reaches Watch.
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/2, in kv's peer scope next
	m.enter(m.kvPeer, "kv/2", map[string]string{"peer": "2"})
	m.addUnits("app", 1, state.Placement{Machine: "3"}) // app/2
	m.enter(m.global, "app/2", map[string]string{"want": "db"})
	m.enter(m.container, "app/2", map[string]string{"unit": "app/2"})
	for _, p := range []pair{pairs[7], pairs[8], pairs[10], pairs[12]} {
		want, got := p.watch.next(), p.many.nextWatch(p.id)
		if got.Relisted || !slices.Equal(changeList(got, true), changeList(want, true)) {
			t.Errorf("WatchMany change for %v = reset %v, %v; Watch's = %v", p.subject, got.Relisted, changeList(got, true), changeList(want, true))
		}
	}
}

// TestAgentWatchManyEndsOnlyTheRefusedSubscription sends WatchMany what it
// must refuse: each refusal ends one id, and the stream serves the rest.
func TestAgentWatchManyEndsOnlyTheRefusedSubscription(t *testing.T) {
	m := newAgentModel(t)
	s := m.watchMany("unit-kv/0")
	scope := &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: m.global}}
	s.subscribe(1, scope, 0)
	if got := changeList(s.nextWatch(1), false); !slices.Equal(got, []string{"app/0"}) {
		t.Fatalf("scope listing = %v, want [app/0]", got)
	}
	config := &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}}
	s.subscribe(2, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/1"}}, 0)
	s.subscribe(3, config, -1)
	s.subscribe(4, config, 0)
	s.subscribe(4, config, 0)
	s.unsubscribe(99)
	s.subscribe(5, &pb.WatchSubject{}, 0)
	s.subscribe(6, &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/9"}}, 0)
	// The first subscription 4 may have listed before the second arrived.
	s.wantEnds([]wantEnd{
		{2, codes.PermissionDenied, "unit kv/0's agent may not watch unit kv/1"},
		{3, codes.InvalidArgument, "invalid revision -1"},
		{4, codes.InvalidArgument, "subscription 4 is in use"},
		{99, codes.InvalidArgument, "no subscription 99"},
		{5, codes.InvalidArgument, "watch needs a subject"},
		{6, codes.NotFound, "unit kv/9 not found"},
	})
	// The stream serves the subscription it had.
	m.addUnits("app", 1, state.Placement{Machine: "3"}) // app/2
	m.enter(m.global, "app/2", nil)
	if got := changeList(s.nextWatch(1), false); !slices.Equal(got, []string{"app/2"}) {
		t.Errorf("scope change = %v, want [app/2]", got)
	}
	for i, r := range s.all {
		if r.GetEnd() == nil {
			continue
		}
		for _, later := range s.all[i+1:] {
			if later.Id == r.Id {
				t.Errorf("subscription %d: %v after its end", r.Id, later)
			}
		}
	}
}

// TestAgentWatchManySubscribesAsAnotherAgent has a machine agent's stream
// carry a unit agent's subscription with the unit's credential: it is
// served as the unit, as it would be on the unit's own stream; a
// credential that does not verify, or is not an agent's, ends its
// subscription alone.
func TestAgentWatchManySubscribesAsAnotherAgent(t *testing.T) {
	m := newAgentModel(t)
	s := m.watchMany("machine-0")
	scope := &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: m.global}}
	send := func(id int64, as *pb.AgentCredential) {
		t.Helper()
		if err := s.stream.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{Id: id, Subject: scope, As: as}}}); err != nil {
			t.Fatalf("subscribe %d: %v", id, err)
		}
	}
	unit := m.Credential("unit-kv/0")
	admin := m.Credential("admin")
	send(1, &pb.AgentCredential{Tag: unit.Tag, Secret: unit.Secret})
	send(2, nil)
	send(3, &pb.AgentCredential{Tag: unit.Tag, Secret: admin.Secret})
	send(4, &pb.AgentCredential{Tag: admin.Tag, Secret: admin.Secret})
	send(5, &pb.AgentCredential{Tag: "unit-kv/0"})
	if got := changeList(s.nextWatch(1), false); !slices.Equal(got, []string{"app/0"}) {
		t.Fatalf("kv/0's scope listing on machine 0's stream = %v, want [app/0]", got)
	}
	s.wantEnds([]wantEnd{
		{2, codes.PermissionDenied, "machine 0's agent may not"},
		{3, codes.Unauthenticated, "credential of unit-kv/0 is not valid"},
		{4, codes.PermissionDenied, "user admin may not watch as an agent"},
		{5, codes.Unauthenticated, "credential of unit-kv/0 is not valid"},
	})
	m.addUnits("app", 1, state.Placement{Machine: "3"}) // app/2
	m.enter(m.global, "app/2", nil)
	if got := changeList(s.nextWatch(1), false); !slices.Equal(got, []string{"app/2"}) {
		t.Errorf("kv/0's scope change = %v, want [app/2]", got)
	}
}

// TestAgentWatchManyUnsubscribeStopsDelivery unsubscribes and subscribes
// the same subject again: the old id hears nothing once the new one has
// started.
func TestAgentWatchManyUnsubscribeStopsDelivery(t *testing.T) {
	m := newAgentModel(t)
	s := m.watchMany("machine-0")
	units := &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}}
	s.subscribe(1, units, 0)
	s.nextWatch(1)
	s.unsubscribe(1)
	s.subscribe(2, units, 0)
	s.nextWatch(2)
	started := len(s.all)
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/2
	if got := changeList(s.nextWatch(2), false); !slices.Equal(got, []string{"kv/2"}) {
		t.Fatalf("change = %v, want [kv/2]", got)
	}
	for _, r := range s.all[started-1:] {
		if r.Id == 1 {
			t.Errorf("unsubscribed subscription 1 got %v", r)
		}
	}
}

// TestAgentWatchManyCarriesManySubscriptions puts hundreds of
// subscriptions on one stream: each lists, and each hears of a change.
func TestAgentWatchManyCarriesManySubscriptions(t *testing.T) {
	m := newAgentModel(t)
	s := m.watchMany("machine-0")
	const n = 300
	for id := int64(1); id <= n; id++ {
		subject := &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}}
		if id%2 == 0 {
			subject = &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/0"}}
		}
		s.subscribe(id, subject, 0)
	}
	for id := int64(1); id <= n; id++ {
		if w := s.nextWatch(id); !w.Relisted || len(w.Changes) != 1 {
			t.Fatalf("subscription %d's first response = %v, want a listing of one", id, w)
		}
	}
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/2
	for id := int64(1); id <= n; id += 2 {
		if got := changeList(s.nextWatch(id), false); !slices.Equal(got, []string{"kv/2"}) {
			t.Fatalf("subscription %d's change = %v, want [kv/2]", id, got)
		}
	}
	m.kill("kv/0")
	for id := int64(2); id <= n; id += 2 {
		for {
			w := s.nextWatch(id)
			last := w.Changes[len(w.Changes)-1]
			if w.Relisted || last.Id != "kv/0" {
				t.Fatalf("subscription %d's change = %v, want kv/0's", id, fmt.Sprint(w))
			}
			if last.GetUnit().GetLife() == pb.Life_LIFE_DEAD {
				break
			}
		}
	}
}

// TestAgentWatchManySlowClientListsAgain has a client stop reading while
// a subject changes far more than its stream's queue holds: the
// controller's memory for it stays bounded (the subscription's queue in
// the hub is dropped) and, reading again, the client catches up through a
// new listing, ending at the latest value.
func TestAgentWatchManySlowClientListsAgain(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{WatchQueue: 4})
	if _, err := e.State.AddMachines(e.Ctx, 1); err != nil {
		t.Fatal(err)
	}
	ch, err := e.State.AddCharm(e.Ctx, &pb.Charm{Name: "kv"}, []byte("kv charm"))
	if err != nil {
		t.Fatal(err)
	}
	setName := func(v string) {
		t.Helper()
		if err := e.State.UpdateServiceConfig(e.Ctx, "kv", map[string]*pb.ConfigValue{"name": {Value: &pb.ConfigValue_StringValue{StringValue: v}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.State.AddService(e.Ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: ch.Name, Revision: ch.Revision, Sha256: ch.Sha256}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.State.AddUnits(e.Ctx, "kv", 1, state.Placement{Machine: "0"}); err != nil {
		t.Fatal(err)
	}
	// The deadline only ends a hang: 30 MiB of writes with the race
	// detector take most of a minute on a loaded machine.
	ctx, cancel := context.WithTimeout(e.Ctx, 5*time.Minute)
	defer cancel()
	stream, err := e.Agent("unit-kv/0").WatchMany(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.WatchManyRequest{Request: &pb.WatchManyRequest_Subscribe{Subscribe: &pb.WatchSubscribe{
		Id: 1, Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || !resp.GetWatch().GetRelisted() {
		t.Fatalf("first response = %v, %v; want the listing", resp, err)
	}
	// 30 MiB of changes the client does not read: more than gRPC's flow
	// control lets the controller send, far more than the queue holds.
	big := strings.Repeat("x", 100<<10)
	const changes = 300
	for i := range changes {
		setName(fmt.Sprintf("%d %s", i, big))
	}
	relisted, n := 0, 0
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv after %d responses: %v", n, err)
		}
		n++
		w := resp.GetWatch()
		if w == nil {
			t.Fatalf("subscription ended: %v", resp)
		}
		if w.Relisted {
			relisted++
		}
		if len(w.Changes) > 0 && strings.HasPrefix(w.Changes[len(w.Changes)-1].GetConfig().GetValues()["name"].GetStringValue(), fmt.Sprint(changes-1, " ")) {
			break
		}
	}
	t.Logf("caught up in %d responses, %d of them listings", n, relisted)
	if relisted == 0 || n >= changes {
		t.Errorf("caught up in %d responses, %d of them listings; want fewer than %d, through a listing", n, relisted, changes)
	}
}

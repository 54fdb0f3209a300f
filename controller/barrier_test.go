package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// upTo reads the stream until each of ids has had a response at or past
// rev (progress included), and returns the barrier's changes seen.
func (s *manyStream) upTo(rev int64, ids ...int64) []*pb.WatchChange {
	s.t.Helper()
	at := map[int64]int64{}
	var barrier []*pb.WatchChange
	for {
		done := true
		for _, id := range ids {
			if at[id] < rev {
				done = false
			}
		}
		if done {
			return barrier
		}
		resp, err := s.stream.Recv()
		if err != nil {
			s.t.Fatalf("WatchMany Recv, waiting for %v to reach revision %d (at %v): %v", ids, rev, at, err)
		}
		w := resp.GetWatch()
		if w == nil {
			s.t.Fatalf("subscription %d ended: %v", resp.Id, resp.GetEnd())
		}
		at[resp.Id] = max(at[resp.Id], w.Revision)
		for _, ch := range w.Changes {
			if ch.Id == "barrier" {
				barrier = append(barrier, ch)
			}
		}
	}
}

// A barrier reaches every subscription of every agent, however quiet its
// subject and however soon after the previous one: two barriers a moment
// apart each bring every subscription to their revision (progress that
// only advances a subscription is otherwise held back to one a second).
// The barrier's own subject carries its revision.
func TestBarrierReachesEverySubscription(t *testing.T) {
	m := newAgentModel(t)
	subject := func(s any) *pb.WatchSubject { return watchSubject(s) }
	unit := m.watchMany("unit-kv/0")
	machine := m.watchMany("machine-0")
	unitSubjects := []*pb.WatchSubject{
		subject(&pb.WatchSubject_Unit{Unit: "kv/0"}),
		subject(&pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}),
		subject(&pb.WatchSubject_RelationScope{RelationScope: m.global}),
		{Subject: &pb.WatchSubject_Barrier{Barrier: true}},
	}
	for i, subj := range unitSubjects {
		unit.subscribe(int64(i+1), subj, 0)
		unit.nextWatch(int64(i + 1))
	}
	machine.subscribe(1, subject(&pb.WatchSubject_MachineUnits{MachineUnits: "0"}), 0)
	machine.subscribe(2, &pb.WatchSubject{Subject: &pb.WatchSubject_Barrier{Barrier: true}}, 0)
	machine.nextWatch(1)
	machine.nextWatch(2)

	admin := m.admin()
	var last int64
	for round := range 2 {
		if round > 0 {
			// Something changes, out of these subjects' sight, so that
			// the next barrier is a new one.
			m.ok("UpdateServiceConfig", m.st.UpdateServiceConfig(m.ctx, "app", map[string]*pb.ConfigValue{"n": {Value: &pb.ConfigValue_IntValue{IntValue: int64(round)}}}, nil))
		}
		resp, err := admin.Barrier(m.ctx, &pb.BarrierRequest{})
		m.ok("Barrier", err)
		rev := resp.Revision
		if rev <= last {
			t.Fatalf("barrier %d = revision %d, want past %d", round, rev, last)
		}
		last = rev
		if got := unit.upTo(rev, 1, 2, 3, 4); len(got) != 1 || got[0].Version != rev {
			t.Errorf("barrier %d: the unit's barrier subject brought %v, want the barrier at %d", round, got, rev)
		}
		machine.upTo(rev, 1, 2)
	}

	_, err := admin.Barrier(m.ctx, &pb.BarrierRequest{AtLeast: last + 1000})
	wantCode(t, "Barrier of a revision not reached", err, codes.InvalidArgument, "the model is at revision")
}

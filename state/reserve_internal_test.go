package state

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// AddUnits calls that wait for one service's sequence at once share one
// reservation of their numbers: each gets its units' numbers in a row, no
// two the same, and then writes its units in a transaction of its own.
func TestAddUnitsShareReservation(t *testing.T) {
	s, ctx, ms := appOnMachines(t, 8)
	// Hold the sequence as a reservation in progress would, until every
	// call has queued behind it.
	unlock, err := s.hot.lock(ctx, seqUnitKey("app"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([][]*pb.Unit, len(ms))
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			us, err := s.AddUnits(ctx, "app", 3, Placement{Machine: m.Id})
			if err != nil {
				t.Error(err)
			}
			got[i] = us
		}()
	}
	poll.UntilSays(t, fmt.Sprintf("%d calls queued for a reservation", len(ms)), func() (bool, string) {
		s.resv.mu.Lock()
		n := len(s.resv.m[seqUnitKey("app")])
		s.resv.mu.Unlock()
		return n == len(ms), fmt.Sprintf("%d queued", n)
	})
	before := s.Stats().Txns
	unlock()
	wg.Wait()
	if txns := s.Stats().Txns - before; txns != int64(len(ms))+1 {
		t.Errorf("%d transactions for %d calls, want one reservation and one each", txns, len(ms))
	}
	var all []int
	for i, us := range got {
		if len(us) != 3 {
			t.Fatalf("call %d added %d units, want 3", i, len(us))
		}
		for j, u := range us {
			n := unitNumber(t, u.Name)
			if j > 0 && n != unitNumber(t, us[j-1].Name)+1 {
				t.Errorf("call %d's units %s and %s are not numbered in a row", i, us[j-1].Name, u.Name)
			}
			if u.MachineId != ms[i].Id {
				t.Errorf("unit %s is on machine %s, want %s", u.Name, u.MachineId, ms[i].Id)
			}
			all = append(all, n)
		}
	}
	sort.Ints(all)
	for i, n := range all {
		if n != i {
			t.Fatalf("numbers given out %v, want 0 to %d each once", all, len(all)-1)
		}
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckInvariants(snap); err != nil {
		t.Fatalf("invariants broken: %v", err)
	}
}

// A refusal seen by the reservation is every queued caller's, and costs
// no numbers.
func TestReservationRefusedCostsNoNumbers(t *testing.T) {
	s, ctx, ms := appOnMachines(t, 2)
	if err := s.DestroyMachine(ctx, ms[1].Id, DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddUnits(ctx, "app", 2, Placement{Machine: ms[1].Id}); err == nil {
		t.Fatal("AddUnits to a dying machine succeeded")
	}
	us, err := s.AddUnits(ctx, "app", 1, Placement{Machine: ms[0].Id})
	if err != nil {
		t.Fatal(err)
	}
	if us[0].Name != "app/0" {
		t.Errorf("unit added after a refusal is %s, want app/0", us[0].Name)
	}
}

func unitNumber(t *testing.T, unit string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(lastSegment(unit), &n); err != nil || names.UnitService(unit) != "app" {
		t.Fatalf("unit name %q", unit)
	}
	return n
}

// A caller whose context ends while it reserves for others answers them
// to ask again, rather than with its context's end: theirs goes on.
func TestReservationLeaderGone(t *testing.T) {
	var q reservations
	lead, other := &reservation{n: 2}, &reservation{n: 3}
	q.queue("k", lead)
	q.queue("k", other)
	batch := q.take("k", lead)
	if len(batch) != 2 {
		t.Fatalf("took %d, want both", len(batch))
	}
	if q.take("k", other) != nil {
		t.Fatal("a request taken by another was taken again")
	}
	q.answer(batch, 0, context.Canceled, true)
	if _, again, err := q.answerOf(other); !again || err == nil {
		t.Errorf("answer (again %v, %v), want to ask again", again, err)
	}
	q.queue("k", other)
	q.leave("k", other)
	if len(q.m) != 0 {
		t.Errorf("queues %v left after the only caller left", q.m)
	}
}

// appOnMachines returns a State over a new model holding service app and
// n machines.
func appOnMachines(t *testing.T, n int) (*State, context.Context, []*pb.Machine) {
	t.Helper()
	ns, ctx := etcdtest.Namespace(t), etcdtest.Context(t)
	s, err := New(etcdtest.Client(t), Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddService(ctx, AddServiceArgs{Name: "app", Charm: &pb.CharmRef{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	ms, err := s.AddMachines(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return s, ctx, ms
}

// A refusal of one caller's own placement is that caller's alone: it
// comes before the caller queues for numbers, and the callers queued with
// it get theirs.
func TestReservationRefusalIsTheCallersOwn(t *testing.T) {
	s, ctx, ms := appOnMachines(t, 2)
	if err := s.DestroyMachine(ctx, ms[1].Id, DestroyOptions{}); err != nil {
		t.Fatal(err)
	}
	unlock, err := s.hot.lock(ctx, seqUnitKey("app"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var us []*pb.Unit
	go func() {
		var err error
		us, err = s.AddUnits(ctx, "app", 2, Placement{Machine: ms[0].Id})
		done <- err
	}()
	// Refused while the sequence is held, so without queueing.
	_, err = s.AddUnits(ctx, "app", 2, Placement{Machine: ms[1].Id})
	if RuleOf(err) != "M1" {
		t.Errorf("AddUnits to a dying machine = %v, want refused by M1", err)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("AddUnits queued beside the refused call: %v", err)
	}
	if us[0].Name != "app/0" || us[1].Name != "app/1" {
		t.Errorf("units added %s and %s, want app/0 and app/1", us[0].Name, us[1].Name)
	}
}

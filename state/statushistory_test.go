package state_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// historyUnit returns a State holding service kv with one unit, kv/0.
func historyUnit(t *testing.T) (*state.State, context.Context) {
	t.Helper()
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	return st, ctx
}

func history(t *testing.T, ctx context.Context, st *state.State, unit string, limit int) []state.StatusHistoryEntry {
	t.Helper()
	h, err := st.StatusHistory(ctx, unit, limit)
	if err != nil {
		t.Fatalf("StatusHistory(%s, %d): %v", unit, limit, err)
	}
	return h
}

// historyKeys counts the snapshot's status history keys of unit.
func historyKeys(t *testing.T, st *state.State, unit string) int {
	t.Helper()
	snap, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range snap.Values {
		if strings.HasPrefix(k, state.StatusHistoryPrefix(unit)) {
			n++
		}
	}
	return n
}

func TestStatusHistoryKeepsTheLast50InOrder(t *testing.T) {
	st, ctx := historyUnit(t)
	kinds := []state.StatusKind{state.StatusUnitAgent, state.StatusUnit}
	before := st.Stats()
	const sets = 120
	for i := 1; i <= sets; i++ {
		kind := kinds[i%2]
		must(t, "SetStatus", st.SetStatus(ctx, kind, "kv/0", &pb.Status{Status: "s", Message: fmt.Sprint(i)}))
	}
	after := st.Stats()
	if got := after.Txns - before.Txns; got != sets {
		t.Errorf("%d SetStatus calls took %d transactions, want one each", sets, got)
	}
	if after.MaxOps > max(before.MaxOps, 6) {
		t.Errorf("largest transaction holds %d operations (%d before the statuses): want appends of at most 6, however long the history", after.MaxOps, before.MaxOps)
	}
	if n := historyKeys(t, st, "kv/0"); n != state.StatusHistoryLimit {
		t.Errorf("kv/0 has %d status history keys after %d changes, want %d", n, sets, state.StatusHistoryLimit)
	}

	h := history(t, ctx, st, "kv/0", 0)
	if len(h) != state.StatusHistoryLimit {
		t.Fatalf("StatusHistory(kv/0, 0) = %d entries, want %d", len(h), state.StatusHistoryLimit)
	}
	for i, e := range h {
		n := sets - state.StatusHistoryLimit + 1 + i // oldest first
		if e.Seq != int64(n) || e.Kind != kinds[n%2] || e.Status.GetMessage() != fmt.Sprint(n) || e.Status.GetSinceUnixNano() == 0 {
			t.Errorf("StatusHistory(kv/0)[%d] = seq %d, %s, %v; want seq %d, %s, message %d, stamped", i, e.Seq, e.Kind, e.Status, n, kinds[n%2], n)
		}
	}
	for _, kind := range kinds {
		cur, err := st.Status(ctx, kind, "kv/0")
		must(t, "Status", err)
		var newest *pb.Status
		for _, e := range h {
			if e.Kind == kind {
				newest = e.Status
			}
		}
		if cur.GetMessage() != newest.GetMessage() || cur.GetSinceUnixNano() != newest.GetSinceUnixNano() {
			t.Errorf("Status(%s, kv/0) = %v, want the newest %s entry of the history, %v", kind, cur, kind, newest)
		}
	}

	for _, tc := range []struct{ limit, want int }{{1, 1}, {5, 5}, {50, 50}, {51, 50}, {1000, 50}} {
		h := history(t, ctx, st, "kv/0", tc.limit)
		if len(h) != tc.want || h[len(h)-1].Seq != sets || h[0].Seq != int64(sets-tc.want+1) {
			t.Errorf("StatusHistory(kv/0, %d) = %d entries, want the newest %d, oldest first", tc.limit, len(h), tc.want)
		}
	}
	_, err := st.StatusHistory(ctx, "kv/0", -1)
	wantErr(t, "StatusHistory(kv/0, -1)", err, state.ErrInvalid, "", "negative")
}

func TestStatusHistorySkipsAnUnchangedStatus(t *testing.T) {
	st, ctx := historyUnit(t)
	set := func(kind state.StatusKind, s *pb.Status) {
		t.Helper()
		must(t, "SetStatus", st.SetStatus(ctx, kind, "kv/0", s))
	}
	set(state.StatusUnit, &pb.Status{Status: "active", Message: "serving", Data: map[string]string{"port": "80"}})
	first, err := st.Status(ctx, state.StatusUnit, "kv/0")
	must(t, "Status", err)
	set(state.StatusUnit, &pb.Status{Status: "active", Message: "serving", Data: map[string]string{"port": "80"}})
	set(state.StatusUnit, &pb.Status{Status: "active", Message: "serving", Data: map[string]string{"port": "80"}, SinceUnixNano: 42})
	if h := history(t, ctx, st, "kv/0", 0); len(h) != 1 {
		t.Errorf("after the same status three times, the history has %d entries, want 1", len(h))
	}
	if cur, err := st.Status(ctx, state.StatusUnit, "kv/0"); err != nil || cur.GetSinceUnixNano() != first.GetSinceUnixNano() {
		t.Errorf("Status(unit, kv/0) = %v, %v; want it unchanged since %d", cur, err, first.GetSinceUnixNano())
	}

	set(state.StatusUnitAgent, &pb.Status{Status: "active", Message: "serving", Data: map[string]string{"port": "80"}}) // the other kind
	set(state.StatusUnit, &pb.Status{Status: "active", Message: "serving", Data: map[string]string{"port": "81"}})      // other data
	set(state.StatusUnit, &pb.Status{Status: "active", Message: "serving"})                                             // no data
	set(state.StatusUnit, &pb.Status{Status: "active", Message: "ready"})                                               // another message
	set(state.StatusUnit, &pb.Status{Status: "blocked", Message: "ready"})                                              // another status
	set(state.StatusUnit, &pb.Status{Status: "blocked", Message: "ready", Data: map[string]string{}})                   // no data either
	h := history(t, ctx, st, "kv/0", 0)
	var got []string
	for _, e := range h {
		got = append(got, fmt.Sprintf("%d %s %s %q %v", e.Seq, e.Kind, e.Status.GetStatus(), e.Status.GetMessage(), e.Status.GetData()))
	}
	want := []string{
		`1 unit active "serving" map[port:80]`,
		`2 unit-agent active "serving" map[port:80]`,
		`3 unit active "serving" map[port:81]`,
		`4 unit active "serving" map[]`,
		`5 unit active "ready" map[]`,
		`6 unit blocked "ready" map[]`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("StatusHistory(kv/0) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestStatusHistoryOnlyOfUnits(t *testing.T) {
	st, ctx := historyUnit(t)
	ms, err := st.AddMachines(ctx, 1)
	must(t, "AddMachines", err)
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusMachine, ms[0].Id, &pb.Status{Status: "started"}))
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusService, "kv", &pb.Status{Status: "active"}))
	if h := history(t, ctx, st, "kv/0", 0); len(h) != 0 {
		t.Errorf("StatusHistory(kv/0) = %v after machine and service statuses, want none", h)
	}

	err = st.SetStatus(ctx, state.StatusUnit, "kv/9", &pb.Status{Status: "active"})
	wantErr(t, "SetStatus(unit, kv/9)", err, state.ErrNotFound, "", "unit kv/9 not found")
	_, err = st.StatusHistory(ctx, "kv/9", 0)
	wantErr(t, "StatusHistory(kv/9)", err, state.ErrNotFound, "", "unit kv/9 not found")
	_, err = st.StatusHistory(ctx, "kv", 0)
	wantErr(t, "StatusHistory(kv)", err, state.ErrInvalid, "", "invalid unit name")
}

func TestStatusHistoryGoesWithTheUnit(t *testing.T) {
	st, ctx := historyUnit(t)
	addUnits(t, ctx, st, "kv", 1, state.Placement{}) // kv/1 keeps its history
	for i := 0; i < 60; i++ {
		for _, u := range []string{"kv/0", "kv/1"} {
			must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, u, &pb.Status{Status: "executing", Message: fmt.Sprint(i)}))
		}
	}
	must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
	must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, "kv/0"))
	if h := history(t, ctx, st, "kv/0", 0); len(h) != state.StatusHistoryLimit {
		t.Errorf("dead kv/0's history has %d entries, want %d until it is removed", len(h), state.StatusHistoryLimit)
	}
	must(t, "RemoveUnit", st.RemoveUnit(ctx, "kv/0"))
	if n := historyKeys(t, st, "kv/0"); n != 0 {
		t.Errorf("removed kv/0 left %d status history keys", n)
	}
	_, err := st.StatusHistory(ctx, "kv/0", 0)
	wantErr(t, "StatusHistory(removed kv/0)", err, state.ErrNotFound, "", "unit kv/0 not found")
	if h := history(t, ctx, st, "kv/1", 0); len(h) != state.StatusHistoryLimit {
		t.Errorf("kv/1's history has %d entries after kv/0's removal, want %d", len(h), state.StatusHistoryLimit)
	}

	// Forced removal takes it too.
	must(t, "DestroyService", st.DestroyService(ctx, "kv"))
	must(t, "DestroyUnit --force", st.DestroyUnit(ctx, "kv/1", state.DestroyOptions{Force: true}))
	for i := 0; i < 3; i++ {
		pass(t, ctx, st)
	}
	if _, err := st.Unit(ctx, "kv/1"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Unit(kv/1) after a forced removal = %v, want not found", err)
	}
	if n := historyKeys(t, st, "kv/1"); n != 0 {
		t.Errorf("forced removal of kv/1 left %d status history keys", n)
	}
}

// Unit agents and their machine agent set a unit's two statuses at once:
// every change gets its own entry, none is lost or doubled, and the history
// stays within its limit at every revision.
func TestRaceStatusHistory(t *testing.T) {
	st, ctx := historyUnit(t)
	mon := statetest.Start(t, st)
	const writers, sets = 6, 25
	kinds := []state.StatusKind{state.StatusUnitAgent, state.StatusUnit}
	fs := make([]func() error, writers)
	for w := range fs {
		fs[w] = func() error {
			for i := 0; i < sets; i++ {
				kind := kinds[(w+i)%2]
				if err := st.SetStatus(ctx, kind, "kv/0", &pb.Status{Status: "s", Message: fmt.Sprintf("%d.%d", w, i)}); err != nil {
					return fmt.Errorf("writer %d, set %d: %w", w, i, err)
				}
			}
			return nil
		}
	}
	for _, err := range parallel(fs...) {
		if err != nil {
			t.Error(err)
		}
	}
	mon.Stop(t)

	h := history(t, ctx, st, "kv/0", 0)
	if len(h) != state.StatusHistoryLimit || h[len(h)-1].Seq != writers*sets {
		t.Fatalf("after %d changes, the history has %d entries, the newest %d; want %d, the newest %d",
			writers*sets, len(h), h[len(h)-1].Seq, state.StatusHistoryLimit, writers*sets)
	}
	seen := map[string]bool{}
	for i, e := range h {
		if seen[e.Status.GetMessage()] {
			t.Errorf("status %q is in the history twice", e.Status.GetMessage())
		}
		seen[e.Status.GetMessage()] = true
		if i > 0 && e.Seq != h[i-1].Seq+1 {
			t.Errorf("history seqs %d then %d: want consecutive", h[i-1].Seq, e.Seq)
		}
	}
	for _, kind := range kinds {
		cur, err := st.Status(ctx, kind, "kv/0")
		must(t, "Status", err)
		var newest string
		for _, e := range h {
			if e.Kind == kind {
				newest = e.Status.GetMessage()
			}
		}
		if cur.GetMessage() != newest {
			t.Errorf("Status(%s, kv/0) = %q, want the newest %s entry %q", kind, cur.GetMessage(), kind, newest)
		}
	}
}

func TestCheckInvariantsStatusHistory(t *testing.T) {
	st, ctx := historyUnit(t)
	for i := 1; i <= 3; i++ {
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnit, "kv/0", &pb.Status{Status: "s", Message: fmt.Sprint(i)}))
	}
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if err := state.CheckInvariants(snap); err != nil {
		t.Fatalf("CheckInvariants = %v, want none", err)
	}
	fresh := func() *state.Snapshot {
		c := &state.Snapshot{Revision: snap.Revision, Values: map[string][]byte{}}
		for k, v := range snap.Values {
			c.Values[k] = v
		}
		return c
	}
	entry := snap.Values[state.StatusHistoryKey("kv/0", 1)]
	for _, tc := range []struct {
		name   string
		mutate func(s *state.Snapshot)
		want   string
	}{
		{"of a unit that does not exist", func(s *state.Snapshot) { s.Values[state.StatusHistoryKey("kv/7", 1)] = entry },
			"status history status-history/kv/7/00000000000000000001 of unit kv/7, which does not exist"},
		{"not consecutive", func(s *state.Snapshot) { delete(s.Values, state.StatusHistoryKey("kv/0", 2)) },
			"status history of unit kv/0 holds 2 entries from 1 to 3: not consecutive"},
		{"over the limit", func(s *state.Snapshot) {
			for i := 4; i <= 51; i++ {
				s.Values[state.StatusHistoryKey("kv/0", int64(i))] = entry
			}
		}, "status history of unit kv/0 holds 51 entries, over the limit of 50"},
		{"a bad key", func(s *state.Snapshot) { s.Values["status-history/kv/0/1"] = entry }, "not 20 digits"},
		{"not a unit status", func(s *state.Snapshot) { s.Values[state.StatusHistoryKey("kv/0", 4)] = []byte{} }, `kind "" is not a unit status kind`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh()
			tc.mutate(s)
			err := state.CheckInvariants(s)
			if err == nil || !containsLine(err.Error(), tc.want) {
				t.Errorf("CheckInvariants = %v, want %q", err, tc.want)
			}
		})
	}
}

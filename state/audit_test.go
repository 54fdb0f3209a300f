package state_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// auditLog reads every entry of the audit log, oldest first, with each
// entry's create revision.
func auditLog(t testing.TB, ctx context.Context, st *state.State) ([]*pb.AuditEntry, map[int64]int64) {
	t.Helper()
	evs, _, err := st.List(ctx, state.AuditPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []*pb.AuditEntry
	created := map[int64]int64{}
	for _, ev := range evs {
		e, err := state.DecodeAuditEntry(ev.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		created[e.Seq] = ev.CreateRevision
	}
	return out, created
}

func audited(ctx context.Context, user, rpc string) (context.Context, *state.Audit) {
	a := state.NewAudit(&pb.AuditEntry{User: user, Rpc: rpc, Summary: rpc + " by " + user})
	return state.WithAudit(ctx, a), a
}

// An audited call's entry commits with its first change, pending; its
// later transactions carry none; its result is filled in when it ends.
func TestAuditEntryCommitsWithTheCallsFirstChange(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)

	actx, a := audited(ctx, "alice", "AddUnits")
	a.AddTargets("service:app")
	_, err := st.AddUnits(actx, "app", 30, state.Placement{})
	must(t, "AddUnits", err)
	commits := a.Commits()
	if len(commits) != 3 {
		t.Fatalf("AddUnits of 30 committed %d transactions for the call, want 3 (14 units a transaction; the reservation is no call's)", len(commits))
	}
	log, created := auditLog(t, ctx, st)
	if len(log) != 1 {
		t.Fatalf("audit log holds %d entries, want 1: %v", len(log), log)
	}
	e := log[0]
	if e.Seq != 1 || a.Seq() != 1 || e.User != "alice" || e.Rpc != "AddUnits" || !e.Changed || !e.Pending || fmt.Sprint(e.Targets) != "[service:app]" {
		t.Errorf("entry = %v, want seq 1 of alice's AddUnits of service:app, changed, pending", e)
	}
	if created[1] != commits[0] {
		t.Errorf("entry 1 was created at revision %d, the call's first change at %d: want the same transaction", created[1], commits[0])
	}
	// A target known only once the change is made (what it made) goes
	// with the result.
	a.AddTargets("unit:app/0")
	must(t, "FinishAudit", st.FinishAudit(ctx, a, 0, "", false))
	log, _ = auditLog(t, ctx, st)
	if e := log[0]; e.Pending || e.Code != 0 || fmt.Sprint(e.Targets) != "[service:app unit:app/0]" {
		t.Errorf("after FinishAudit, entry = %v, want its result OK and the target added late", e)
	}

	// A refused call: an entry of its own, after the refusal.
	rctx, r := audited(ctx, "bob", "DestroyMachine")
	err = st.DestroyMachine(rctx, "0", state.DestroyOptions{})
	wantErr(t, "DestroyMachine 0", err, state.ErrRefused, "M2", "machine 0 has unit app/0 assigned")
	if r.Seq() != 0 {
		t.Errorf("a refused call has an entry from a change: %d", r.Seq())
	}
	must(t, "FinishAudit", st.FinishAudit(ctx, r, 9, err.Error(), true))
	// A call that changes nothing and is not refused: no entry.
	nctx, n := audited(ctx, "bob", "DestroyService")
	must(t, "DestroyService", st.DestroyService(nctx, "app"))
	nctx2, n2 := audited(ctx, "bob", "DestroyService")
	must(t, "DestroyService again", st.DestroyService(nctx2, "app")) // dying already: nothing to do
	must(t, "FinishAudit", st.FinishAudit(ctx, n, 0, "", false))
	must(t, "FinishAudit", st.FinishAudit(ctx, n2, 0, "", false))
	log, _ = auditLog(t, ctx, st)
	var got []string
	for _, e := range log {
		got = append(got, fmt.Sprintf("%d %s %s changed=%v pending=%v code=%d", e.Seq, e.User, e.Rpc, e.Changed, e.Pending, e.Code))
	}
	want := []string{
		"1 alice AddUnits changed=true pending=false code=0",
		"2 bob DestroyMachine changed=false pending=false code=9",
		"3 bob DestroyService changed=true pending=false code=0",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit log =\n%v\nwant\n%v", got, want)
	}

	// A change committed once, outside apply (as the barrier is), carries
	// the call's entry as well when it is the call's first.
	sctx, sa := audited(ctx, "bob", "SetStatus")
	must(t, "SetStatus", st.SetStatus(sctx, state.StatusMachine, "0", &pb.Status{Status: "x"}))
	log, created = auditLog(t, ctx, st)
	if c := sa.Commits(); sa.Seq() != 4 || len(log) != 4 || len(c) != 1 || created[4] != c[0] || log[3].User != "bob" || !log[3].Changed {
		t.Errorf("SetStatus as an audited call's first change: seq %d, commits %v; log %v: want entry 4, bob's, in its transaction", sa.Seq(), c, log)
	}
}

// Operators' calls made at once through one controller, as a script
// adding units to many machines sixteen at a time makes them, each take
// the next seq in turn: none of their transactions fails its comparisons
// on the audit log's seq (and so none is made again), and the log holds
// one entry a call, without gaps.
func TestConcurrentAuditedCallsQueueForTheSeq(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	const calls = 64
	ms, err := st.AddMachines(ctx, calls)
	must(t, "AddMachines", err)
	before := st.Stats().Conflicts
	errs := make(chan error, calls)
	sem := make(chan struct{}, 16)
	for _, m := range ms {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			actx, _ := audited(ctx, "alice", "AddUnits")
			_, err := st.AddUnits(actx, "app", 1, state.Placement{Machine: m.Id})
			errs <- err
		}()
	}
	for range calls {
		must(t, "AddUnits", <-errs)
	}
	if n := st.Stats().Conflicts - before; n != 0 {
		t.Errorf("%d audited calls at once: %d transactions failed their comparisons (%v), want none", calls, n, st.ConflictsByOp())
	}
	log, _ := auditLog(t, ctx, st)
	for i, e := range log {
		if e.Seq != int64(i+1) || e.Rpc != "AddUnits" {
			t.Fatalf("entry %d = %v, want seq %d of an AddUnits", i, e, i+1)
		}
	}
	if len(log) != calls {
		t.Errorf("audit log holds %d entries, want %d", len(log), calls)
	}
}

// Entries are cut to their bounds.
func TestAuditEntriesAreBounded(t *testing.T) {
	st, ctx := newState(t)
	e := &pb.AuditEntry{User: "alice", Rpc: "AddMachines", Summary: string(make([]byte, 5000))}
	for i := range 100 {
		e.Targets = append(e.Targets, fmt.Sprintf("machine:%d", i))
	}
	a := state.NewAudit(e)
	_, err := st.AddMachines(state.WithAudit(ctx, a), 1)
	must(t, "AddMachines", err)
	must(t, "FinishAudit", st.FinishAudit(ctx, a, 0, string(make([]byte, 5000)), false))
	log, _ := auditLog(t, ctx, st)
	got := log[0]
	if len(got.Targets) != state.MaxAuditTargets || got.Targets[state.MaxAuditTargets-1] != "(69 more)" || len(got.Summary) > 1024 || len(got.Message) > 1024 {
		t.Errorf("entry has %d targets (last %q), a summary of %d bytes and a message of %d, want %d, (69 more), at most 1024 each",
			len(got.Targets), got.Targets[len(got.Targets)-1], len(got.Summary), len(got.Message), state.MaxAuditTargets)
	}
}

func TestPruneAuditKeepsTheNewestWithinRetention(t *testing.T) {
	st, ctx, clk := newClockedState(t)
	record := func(n int) {
		for range n {
			a := state.NewAudit(&pb.AuditEntry{User: "alice", Rpc: "Deploy"})
			must(t, "FinishAudit", st.FinishAudit(ctx, a, 3, "no", true))
			clk.Advance(time.Hour)
		}
	}
	record(2500)
	// By count: the oldest beyond 1,200 go, a thousand a transaction.
	before := st.Stats().Txns
	n, err := st.PruneAudit(ctx, state.AuditRetention{MaxAge: 10000 * time.Hour, MaxEntries: 1200})
	must(t, "PruneAudit", err)
	if n != 1300 {
		t.Errorf("PruneAudit by count deleted %d, want 1300", n)
	}
	if txns := st.Stats().Txns - before; txns != 2 {
		t.Errorf("PruneAudit of 1300 took %d transactions, want 2", txns)
	}
	// By age: the entries older than 100 hours go (the newest was made
	// an hour ago).
	n, err = st.PruneAudit(ctx, state.AuditRetention{MaxAge: 100 * time.Hour, MaxEntries: 1200})
	must(t, "PruneAudit", err)
	if n != 1100 {
		t.Errorf("PruneAudit by age deleted %d, want 1100", n)
	}
	log, _ := auditLog(t, ctx, st)
	if len(log) != 100 || log[0].Seq != 2401 || log[99].Seq != 2500 {
		t.Errorf("after pruning, the log holds %d entries from %d to %d, want 100 from 2401 to 2500", len(log), log[0].Seq, log[len(log)-1].Seq)
	}
	record(1)
	if log, _ := auditLog(t, ctx, st); log[len(log)-1].Seq != 2501 {
		t.Errorf("the entry after pruning is %d, want 2501", log[len(log)-1].Seq)
	}
	if _, err := st.PruneAudit(ctx, state.AuditRetention{}); err == nil {
		t.Error("PruneAudit with a retention of nothing: no error")
	}
}

func TestScanAuditFiltersAndBounds(t *testing.T) {
	st, ctx, clk := newClockedState(t)
	start := clk.Now()
	for i := range 1200 {
		user := []string{"alice", "bob"}[i%2]
		rpc := "DestroyUnit"
		if i%100 == 0 {
			rpc = "Deploy"
		}
		a := state.NewAudit(&pb.AuditEntry{User: user, Rpc: rpc, Targets: []string{fmt.Sprintf("unit:kv/%d", i%7), "machine:3"}})
		must(t, "FinishAudit", st.FinishAudit(ctx, a, 9, "no", true))
		clk.Advance(time.Second)
	}
	for _, tt := range []struct {
		name          string
		q             state.AuditQuery
		limit, budget int
		want          int
		first         int64
		truncated     bool
	}{
		{"newest 100", state.AuditQuery{}, 100, 100000, 100, 1101, true},
		{"alice's newest 10", state.AuditQuery{User: "alice"}, 10, 100000, 10, 1181, true},
		{"since 100 s ago", state.AuditQuery{Since: start.Add(1100 * time.Second)}, 1000, 100000, 100, 1101, false},
		{"unit kv/3", state.AuditQuery{Entity: "kv/3"}, 10000, 100000, 171, 4, false},
		{"service kv", state.AuditQuery{Entity: "kv"}, 10000, 100000, 1200, 1, false},
		{"machine:3", state.AuditQuery{Entity: "machine:3"}, 10000, 100000, 1200, 1, false},
		{"nobody, within a budget", state.AuditQuery{User: "carol"}, 10, 700, 0, 0, true},
		{"rpc deploy, the oldest too", state.AuditQuery{RPC: "deploy"}, 1000, 100000, 12, 1, false},
		{"rpc Deploy of bob", state.AuditQuery{RPC: "Deploy", User: "bob"}, 1000, 100000, 0, 0, false},
	} {
		got, truncated, rev, err := st.ScanAudit(ctx, tt.q, tt.limit, tt.budget)
		must(t, "ScanAudit "+tt.name, err)
		if len(got) != tt.want || truncated != tt.truncated || rev == 0 {
			t.Errorf("ScanAudit(%s) = %d entries, truncated %v, at %d; want %d, %v", tt.name, len(got), truncated, rev, tt.want, tt.truncated)
			continue
		}
		if len(got) > 0 && (got[0].Seq != tt.first || got[len(got)-1].Seq < got[0].Seq) {
			t.Errorf("ScanAudit(%s) starts at %d, ends at %d; want from %d, oldest first", tt.name, got[0].Seq, got[len(got)-1].Seq, tt.first)
		}
	}
	after, _, err := st.AuditAfter(ctx, 1195, 100)
	must(t, "AuditAfter", err)
	if len(after) != 5 || after[0].Seq != 1196 {
		t.Errorf("AuditAfter(1195) = %d entries from %v, want 5 from 1196", len(after), after)
	}
}

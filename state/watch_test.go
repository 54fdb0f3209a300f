package state_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func next(t *testing.T, ch <-chan state.WatchBatch) state.WatchBatch {
	t.Helper()
	for {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			if b.Reset || len(b.Events) > 0 {
				return b
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no watch batch within 10s")
		}
	}
}

func keys(b state.WatchBatch) []string {
	out := make([]string, len(b.Events))
	for i, e := range b.Events {
		out[i] = e.Key
		if e.Type == state.EventDelete {
			out[i] = "-" + e.Key
		}
	}
	return out
}

func TestWatchListsThenStreamsAndResumes(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	wctx, cancel := context.WithCancel(ctx)
	ch := st.Watch(wctx, state.ServiceUnitsPrefix("app"), 0)
	first := next(t, ch)
	if !first.Reset || len(first.Events) != 0 {
		t.Fatalf("first batch = %+v, want an empty reset", first)
	}
	addUnits(t, ctx, st, "app", 2, state.Placement{Unassigned: true})
	b := next(t, ch)
	if got := keys(b); len(got) != 2 || got[0] != "units/app/0" || got[1] != "units/app/1" {
		t.Fatalf("batch = %v, want both units in one batch (one transaction)", got)
	}
	resumeAt := b.Revision
	cancel()

	// Changes while nobody watches.
	must(t, "DestroyUnit", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{}))
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})

	ch = st.Watch(ctx, state.ServiceUnitsPrefix("app"), resumeAt)
	var got []string
	for len(got) < 2 {
		b := next(t, ch)
		if b.Reset {
			t.Fatalf("resume from %d gave a reset", resumeAt)
		}
		got = append(got, keys(b)...)
	}
	if len(got) != 2 || got[0] != "-units/app/0" || got[1] != "units/app/2" {
		t.Errorf("resumed events = %v, want [-units/app/0 units/app/2] (the unassigned unit is removed at once)", got)
	}
}

func TestWatchRelistsAfterCompaction(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	old := snap.Revision
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	snap, err = st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if _, err := etcdtest.Client(t).Compact(ctx, snap.Revision); err != nil {
		t.Fatal(err)
	}
	b := next(t, st.Watch(ctx, state.ServiceUnitsPrefix("app"), old))
	if !b.Reset || b.Revision < snap.Revision {
		t.Fatalf("batch after compaction = reset %v at %d, want a reset at or after %d", b.Reset, b.Revision, snap.Revision)
	}
	if got := keys(b); len(got) != 3 {
		t.Errorf("reset lists %v, want the 3 units", got)
	}
}

func TestWatchChangesNeverListsAndSaysWhatCompactionLost(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	from, err := st.Revision(ctx)
	must(t, "Revision", err)
	wctx, cancel := context.WithCancel(ctx)
	ch := st.WatchChanges(wctx, "", from)
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	b := next(t, ch)
	if b.Reset || len(b.Events) == 0 || b.Events[0].Key != "seq/unit/app" {
		t.Fatalf("first batch = reset %v, %v; want the whole namespace's changes, starting with the unit sequence", b.Reset, keys(b))
	}
	cancel()

	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	addUnits(t, ctx, st, "app", 1, state.Placement{Unassigned: true})
	now, err := st.Revision(ctx)
	must(t, "Revision", err)
	if _, err := etcdtest.Client(t).Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	b = next(t, st.WatchChanges(ctx, state.ServiceUnitsPrefix("app"), b.Revision))
	if !b.Reset || len(b.Events) != 0 || b.Revision < now {
		t.Fatalf("batch after compaction = reset %v at %d with %v, want an empty reset at or after %d", b.Reset, b.Revision, keys(b), now)
	}
}

func TestListReadsOneRevision(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addUnits(t, ctx, st, "app", 11, state.Placement{Unassigned: true})
	evs, rev, err := st.List(ctx, state.ServiceUnitsPrefix("app"))
	must(t, "List", err)
	now, err := st.Revision(ctx)
	must(t, "Revision", err)
	if len(evs) != 11 || rev != now {
		t.Fatalf("List = %d events at %d, want 11 at %d", len(evs), rev, now)
	}
	for _, e := range evs {
		if e.Type != state.EventPut || e.ModRevision == 0 || e.ModRevision > rev || len(e.Value) == 0 {
			t.Errorf("event %+v: want a put with its value, written at or before %d", e, rev)
		}
	}
	evs, rev, err = st.ListKey(ctx, state.UnitKey("app/1"))
	must(t, "ListKey", err)
	if len(evs) != 1 || evs[0].Key != "units/app/1" || rev != now {
		t.Errorf("ListKey(units/app/1) = %v at %d, want units/app/1 alone (not app/10) at %d", evs, rev, now)
	}
}

func TestLifeCheckerCatchesBackwardsLifeAndReuse(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addUnits(t, ctx, st, "app", 1, state.Placement{})
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	unitAlive := snap.Values["units/app/0"]
	must(t, "DestroyUnit", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{}))
	snap, err = st.Snapshot(ctx)
	must(t, "Snapshot", err)
	unitDying := snap.Values["units/app/0"]

	put := func(rev, create int64, v []byte) state.WatchBatch {
		return state.WatchBatch{Revision: rev, Events: []state.Event{{Type: state.EventPut, Key: "units/app/0", Value: v, CreateRevision: create, ModRevision: rev}}}
	}
	del := state.WatchBatch{Revision: 4, Events: []state.Event{{Type: state.EventDelete, Key: "units/app/0", ModRevision: 4}}}
	tests := []struct {
		name    string
		batches []state.WatchBatch
		bad     bool
	}{
		{"forward", []state.WatchBatch{put(2, 2, unitAlive), put(3, 2, unitDying)}, false},
		{"backward", []state.WatchBatch{put(2, 2, unitDying), put(3, 2, unitAlive)}, true},
		{"created dying", []state.WatchBatch{put(2, 2, unitAlive), del, put(5, 5, unitDying)}, true},
		{"name reused", []state.WatchBatch{put(2, 2, unitAlive), del, put(5, 5, unitAlive)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc := state.NewLifeChecker()
			var err error
			for _, b := range tt.batches {
				if e := lc.Observe(b); e != nil {
					err = e
				}
			}
			if (err != nil) != tt.bad {
				t.Errorf("Observe = %v, want a violation: %v", err, tt.bad)
			}
		})
	}
}

func TestCheckInvariantsCatchesBrokenModels(t *testing.T) {
	tests := []struct {
		name   string
		breaks func(v map[string][]byte)
		want   string
	}{
		{"unit without service", func(v map[string][]byte) { delete(v, "services/app"); delete(v, "config/app") }, "I2: unit app/0: service app does not exist"},
		{"subordinate without principal", func(v map[string][]byte) { delete(v, "units/app/0") }, "I2: subordinate logger/0: principal app/0 does not exist"},
		{"dead machine with a unit", func(v map[string][]byte) { v["machines/0"] = v["dead-machine"] }, "I3: dead machine 0 has unit app/0 assigned"},
		{"scope entry of a missing relation", func(v map[string][]byte) { delete(v, "relations/1") }, "I4: scope entry 1/app/0: relation 1 does not exist"},
		{"dead unit in scope", func(v map[string][]byte) { v["units/kv/0"] = v["dead-kv"] }, "I5: dead unit kv/0 is in the scope of relation 1"},
		{"relation of a missing service", func(v map[string][]byte) { delete(v, "services/kv"); delete(v, "config/kv") }, "I6: relation 1 (app:db kv:server): service kv does not exist"},
		{"sequence behind", func(v map[string][]byte) { v["seq/machine"] = []byte("1") }, "I7: machine 1 is not below its sequence 1"},
		{"missing reference", func(v map[string][]byte) { delete(v, "refs/machine-alive-units/0/app/0") }, "alive reference from machine 0 is false"},
		{"join token of a missing machine", func(v map[string][]byte) { v["machine-joins/9"] = joinToken(t) }, "machine-joins/9 outlives its entity"},
		{"join token of a provided machine", func(v map[string][]byte) { v["machine-joins/0"] = joinToken(t) }, "join token machine-joins/0 of machine 0, which is not manual"},
		{"join token without an expiry", func(v map[string][]byte) { v["machine-joins/9"] = []byte{} }, "join token machine-joins/9 has no hash or no expiry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "app", appEndpoints)
			addService(t, ctx, st, "kv", kvEndpoints)
			addService(t, ctx, st, "logger", loggerEndpoints)
			addUnits(t, ctx, st, "app", 1, state.Placement{})
			addUnits(t, ctx, st, "kv", 1, state.Placement{})
			rel := relate(t, ctx, st, "app", "kv")
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "app/0", nil))
			must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "kv/0", nil))
			_, err := st.AddSubordinate(ctx, "app/0", "logger")
			must(t, "AddSubordinate", err)
			// A dead machine, made the legal way, to borrow its value.
			ms, err := st.AddMachines(ctx, 1)
			must(t, "AddMachines", err)
			must(t, "DestroyMachine", st.DestroyMachine(ctx, ms[0].Id, state.DestroyOptions{}))
			must(t, "EnsureMachineDead", st.EnsureMachineDead(ctx, ms[0].Id))
			snap, err := st.Snapshot(ctx)
			must(t, "Snapshot", err)
			if err := state.CheckInvariants(snap); err != nil {
				t.Fatalf("the model before breaking it: %v", err)
			}
			v := snap.Values
			// Machine 0 (app/0's) made dead: the dead machine's value, renamed.
			v["dead-machine"] = reID(t, v["machines/"+ms[0].Id], "0")
			v["dead-kv"] = deadUnit(t, v["units/kv/0"])
			tt.breaks(v)
			delete(v, "dead-machine")
			delete(v, "dead-kv")
			err = state.CheckInvariants(snap)
			if err == nil || !containsLine(err.Error(), tt.want) {
				t.Errorf("CheckInvariants = %v, want %q", err, tt.want)
			}
		})
	}
}

// joinToken is a stored join token's value.
func joinToken(t *testing.T) []byte {
	b, err := proto.Marshal(&pb.MachineJoin{Hash: "h", ExpiresUnixNano: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestListManyIsListAtOneRevision lists many keys and prefixes at once:
// each as List or ListKey would, a prefix of more than a page whole, and
// all at one revision even across the transactions of more than 64
// specs while a key they list keeps changing.
func TestListManyIsListAtOneRevision(t *testing.T) {
	ns := etcdtest.Namespace(t)
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	must(t, "New", err)
	ctx := etcdtest.Context(t)
	kv := namespace.NewKV(etcdtest.Client(t).KV, ns)
	for lo := 0; lo < 2100; lo += 100 {
		var ops []clientv3.Op
		for i := lo; i < lo+100; i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("big/%04d", i), "v"))
		}
		if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"small/a", "small/b", "smaller", "one"} {
		if _, err := kv.Put(ctx, k, k); err != nil {
			t.Fatal(err)
		}
	}

	specs := []state.ListSpec{{Key: "big/", Prefix: true}, {Key: "small/", Prefix: true}, {Key: "one"}, {Key: "none"}, {Key: "small"}}
	got, rev, err := st.ListMany(ctx, specs)
	must(t, "ListMany", err)
	for i, sp := range specs {
		list, lrev := st.ListKey, "ListKey"
		if sp.Prefix {
			list, lrev = st.List, "List"
		}
		want, at, err := list(ctx, sp.Key)
		must(t, lrev, err)
		if at != rev {
			t.Fatalf("%s(%s) read at %d, ListMany at %d, with nothing written between", lrev, sp.Key, at, rev)
		}
		if !slices.EqualFunc(got[i], want, func(a, b state.Event) bool {
			return a.Key == b.Key && string(a.Value) == string(b.Value) && a.ModRevision == b.ModRevision && a.Type == b.Type
		}) {
			t.Errorf("ListMany's %+v: %d events, want %s's %d", sp, len(got[i]), lrev, len(want))
		}
	}
	if len(got[0]) != 2100 {
		t.Errorf("big/ listed %d keys, want 2100", len(got[0]))
	}

	// 130 specs take three transactions: all read at the first's revision.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	written := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if _, err := kv.Put(wctx, "small/a", strconv.Itoa(i)); err != nil {
				written <- wctx.Err()
				return
			}
		}
	}()
	specs = nil
	for range 130 {
		specs = append(specs, state.ListSpec{Key: "small/a"})
	}
	for range 5 {
		got, rev, err := st.ListMany(ctx, specs)
		must(t, "ListMany", err)
		for i, evs := range got {
			if len(evs) != 1 || evs[0].ModRevision != got[0][0].ModRevision || evs[0].ModRevision > rev {
				t.Fatalf("spec %d of 130 read %v, the first %v: want one revision, at or before %d", i, evs, got[0], rev)
			}
		}
	}
	stop()
	if err := <-written; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

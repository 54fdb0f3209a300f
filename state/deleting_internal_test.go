package state

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// Candidate witnesses are taken from the keys no transaction in flight
// deletes, when there are any; a key deleted by two transactions stays
// going until both are done; a range deletion counts for no key.
func TestDeletionsInFlight(t *testing.T) {
	var d deletions
	del := func(keys ...string) *change {
		c := &change{}
		for _, k := range keys {
			c.del(k)
		}
		c.delPrefix("units/app/9/")
		return c
	}
	check := func(why string, in, want []string) {
		t.Helper()
		var got []string
		for _, kv := range d.staying(kvs(in...)) {
			got = append(got, string(kv.Key))
		}
		if !slices.Equal(got, want) {
			t.Errorf("staying(%q) = %q, want %q: %s", in, got, want, why)
		}
	}
	a := d.add(del("units/app/56", "units/app/41"))
	b := d.add(del("units/app/56"))
	check("41 and 56 going", []string{"units/app/41", "units/app/56", "units/app/39"}, []string{"units/app/39"})
	check("every one going", []string{"units/app/56", "units/app/41"}, []string{"units/app/56", "units/app/41"})
	check("the range deleted counts for no key", []string{"units/app/9/x", "units/app/56"}, []string{"units/app/9/x"})
	d.done(a)
	check("56 still going once", []string{"units/app/41", "units/app/56"}, []string{"units/app/41"})
	d.done(b)
	check("nothing in flight", []string{"units/app/41", "units/app/56"}, []string{"units/app/41", "units/app/56"})
	if len(d.keys) != 0 {
		t.Errorf("keys in flight left: %v", d.keys)
	}
}

// txnRecorder keeps the transactions a State sends.
type txnRecorder struct {
	etcdserverpb.KVClient
	mu   sync.Mutex
	txns []*etcdserverpb.TxnRequest
}

func (k *txnRecorder) Txn(ctx context.Context, r *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	k.mu.Lock()
	k.txns = append(k.txns, r)
	k.mu.Unlock()
	return k.KVClient.Txn(ctx, r, opts...)
}

// reset forgets the transactions recorded so far.
func (k *txnRecorder) reset() {
	k.mu.Lock()
	k.txns = nil
	k.mu.Unlock()
}

// witnesses returns the keys the recorded transactions assert exist
// (change.ifExists), without the namespace.
func (k *txnRecorder) witnesses(ns string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, r := range k.txns {
		for _, c := range r.Compare {
			if c.Target == etcdserverpb.Compare_CREATE && c.Result == etcdserverpb.Compare_GREATER && len(c.RangeEnd) == 0 {
				out = append(out, strings.TrimPrefix(string(c.Key), ns))
			}
		}
	}
	return out
}

// A removal from a dying service takes as its witness a unit that none of
// the State's transactions in flight is removing, when there is one: the
// farthest neighbour there, app/26, unless a removal of it is in flight.
func TestWitnessNotBeingDeleted(t *testing.T) {
	st, ctx, _ := appOnMachines(t, 1)
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := st.AddUnits(ctx, "app", 30, Placement{})
	step("AddUnits", err)
	step("DestroyService", st.DestroyService(ctx, "app"))
	rec := &txnRecorder{KVClient: st.etcd.Remote}
	st.etcd.Remote = rec
	for _, tt := range []struct {
		unit      string
		inFlight  []string
		witnesses []string
	}{
		{"app/10", nil, []string{"units/app/26"}},
		{"app/12", []string{"units/app/28"}, []string{"units/app/11", "units/app/13"}},
	} {
		step("DestroyUnit", st.DestroyUnit(ctx, tt.unit, DestroyOptions{}))
		step("EnsureUnitDead", st.EnsureUnitDead(ctx, tt.unit))
		c := &change{}
		for _, k := range tt.inFlight {
			c.del(k)
		}
		going := st.deleting.add(c)
		rec.reset()
		step("RemoveUnit", st.RemoveUnit(ctx, tt.unit))
		st.deleting.done(going)
		got := rec.witnesses(st.cfg.Namespace)
		if len(got) != 1 || !slices.Contains(tt.witnesses, got[0]) {
			t.Errorf("removing %s with %q in flight: witnesses %q, want one of %q", tt.unit, tt.inFlight, got, tt.witnesses)
		}
	}
}

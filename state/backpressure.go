package state

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd refuses a write with "etcdserver: too many requests" while the
// entries it has committed run more than 5,000 ahead of those it has
// applied: it is behind, and says so before proposing anything, so the
// write did not happen and may simply be sent again. A burst of agents'
// calls at once (10,000 units leaving a relation) was enough for it, and
// each refused call reached its agent as an Internal error, to be retried
// seconds later. The State now keeps its own writes in flight below that
// gap and, should etcd refuse one anyway (other clients write to the same
// cluster, or leases expire in a heap), sends it again after a short
// pause, until the caller's context ends.

// DefaultMaxWritesInFlight is how many write requests a State has in
// etcd at once unless its Config says otherwise: a twentieth of the gap
// etcd allows between committed and applied entries, and as many clients
// as the scale harness's raw measurement, which keep etcd busy batching
// writes into each append to its log. More in flight adds nothing but
// waiting in etcd: with 1,000, a write took up to four times as long in
// the harness's bursts.
const DefaultMaxWritesInFlight = 256

// leadSlots is how many writes that go ahead of the queue (Ahead) may
// have in etcd beyond the State's slots. Queued behind the work they
// release (the departures of the units set dying before them), a
// cascade's batches set the pace of the start of a destroy: 10,000 units
// took 8-10 s to be set dying while the machine's CPUs were 86% busy;
// ahead of the queue, all are dying within 5 s. Queued behind every
// agent's writes, an operator's destroy-machine took up to 4 s while
// 10,000 units went, and the provisioner's removals of dead machines
// waited for the last unit. Such writes are few at any time (eight
// batches of a cascade, sixteen removals), so going first holds nobody
// back for long.
const leadSlots = 64

// maxBusyPause bounds the pause before a write etcd refused is sent again.
const maxBusyPause = 100 * time.Millisecond

// gatedKV is the State's KV: writes wait for one of a bounded number of
// slots, and a write etcd refused as too many is sent again.
type gatedKV struct {
	clientv3.KV
	slots chan struct{}
	// lead are the slots of the writes that go ahead of the queue.
	lead chan struct{}
	// waiting counts the callers waiting for a slot.
	waiting atomic.Int64
	// busy counts the writes etcd refused as too many.
	busy *atomic.Int64
}

func newGatedKV(kv clientv3.KV, slots int, busy *atomic.Int64) *gatedKV {
	return &gatedKV{KV: kv, slots: make(chan struct{}, slots), lead: make(chan struct{}, leadSlots), busy: busy}
}

func (k *gatedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	var resp *clientv3.PutResponse
	err := k.write(ctx, func() (err error) {
		resp, err = k.KV.Put(ctx, key, val, opts...)
		return err
	})
	if err == nil {
		metered(ctx, len(key)+len(val))
	}
	return resp, err
}

func (k *gatedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	var resp *clientv3.DeleteResponse
	err := k.write(ctx, func() (err error) {
		resp, err = k.KV.Delete(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (k *gatedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if !writes(op) {
		return k.KV.Do(ctx, op)
	}
	var resp clientv3.OpResponse
	err := k.write(ctx, func() (err error) {
		resp, err = k.KV.Do(ctx, op)
		return err
	})
	return resp, err
}

func (k *gatedKV) Txn(ctx context.Context) clientv3.Txn {
	return &gatedTxn{Txn: k.KV.Txn(ctx), k: k, ctx: ctx}
}

// heldSlot marks a context whose writes use a slot already held (hold).
type heldSlot struct{}

// leading marks a context whose writes others' work waits on (ahead).
type leading struct{}

// Ahead returns ctx with its writes marked to go ahead of the writes
// queued for the State's slots: they take one of the lead slots while any
// is free, and queue only when none is. It is for the few writes that
// others wait on: a cascade's batches, the provisioner's, an operator's
// command, while thousands of agents' writes queue; never for an agent's.
func Ahead(ctx context.Context) context.Context { return context.WithValue(ctx, leading{}, true) }

// IsAhead reports whether ctx's writes go ahead of the queue (Ahead).
func IsAhead(ctx context.Context) bool { return ctx.Value(leading{}) != nil }

// hold takes a slot for all the writes made with the returned context,
// until release is called; with a context that holds one already, it
// takes nothing. An operation (State.apply) takes one before its first
// read and holds it for all its attempts: what it read does not age while
// it queues, and a retry after a conflict does not wait again behind
// every write queued since its first (in a burst, 10,000 units leaving a
// relation at once and 5,800 retries, 1% of the departures took over 4 s,
// and some 16, against at most 4 for the calls that never conflict).
func (k *gatedKV) hold(ctx context.Context) (held context.Context, release func(), err error) {
	if ctx.Value(heldSlot{}) != nil {
		return ctx, func() {}, nil
	}
	if IsAhead(ctx) {
		select {
		case k.lead <- struct{}{}:
			return context.WithValue(ctx, heldSlot{}, true), func() { <-k.lead }, nil
		default:
		}
	}
	select {
	case k.slots <- struct{}{}:
	default:
		k.waiting.Add(1)
		select {
		case k.slots <- struct{}{}:
			k.waiting.Add(-1)
		case <-ctx.Done():
			k.waiting.Add(-1)
			return ctx, func() {}, ctx.Err()
		}
	}
	return context.WithValue(ctx, heldSlot{}, true), func() { <-k.slots }, nil
}

// Busy reports whether the State's writes queue: at least as many wait
// for a slot in etcd as there are slots. A caller may then decline work
// that can wait, or need not be done (a unit agent's progress report).
func (s *State) Busy() bool {
	return s.gate.waiting.Load() >= int64(cap(s.gate.slots))
}

// write runs f, which sends one write request, in a slot (ctx's, if it
// holds one), again after a pause each time etcd refuses it as too many.
func (k *gatedKV) write(ctx context.Context, f func() error) error {
	ctx, release, err := k.hold(ctx)
	if err != nil {
		return err
	}
	defer release()
	pause := time.Millisecond
	for {
		err := f()
		if !tooManyRequests(err) {
			return err
		}
		k.busy.Add(1)
		t := time.NewTimer(rand.N(pause) + pause/2)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, maxBusyPause)
	}
}

// tooManyRequests reports whether etcd refused a request because it is
// behind applying what it committed.
func tooManyRequests(err error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrTooManyRequests.Error()
}

// gatedTxn is a transaction of gatedKV: committed in a slot when any of
// its operations writes.
type gatedTxn struct {
	clientv3.Txn
	k      *gatedKV
	ctx    context.Context
	writes bool
}

func (t *gatedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *gatedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.writes = t.writes || writes(ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *gatedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.writes = t.writes || writes(ops...)
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *gatedTxn) Commit() (*clientv3.TxnResponse, error) {
	if !t.writes {
		return t.Txn.Commit()
	}
	var resp *clientv3.TxnResponse
	err := t.k.write(t.ctx, func() (err error) {
		resp, err = t.Txn.Commit()
		return err
	})
	return resp, err
}

// writes reports whether any of ops writes (a nested transaction counts).
func writes(ops ...clientv3.Op) bool {
	for _, op := range ops {
		if op.IsPut() || op.IsDelete() || op.IsTxn() {
			return true
		}
	}
	return false
}

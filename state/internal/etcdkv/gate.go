package etcdkv

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
// seconds later. A Gate keeps its writes in flight below that gap and,
// should etcd refuse one anyway (other clients write to the same cluster,
// or leases expire in a heap), sends it again after a short pause, until
// the caller's context ends.

// leadSlots is how many writes that go ahead of the queue (WithPriority) may
// have in etcd beyond the gate's slots. Queued behind the work they
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

// Gate bounds the writes in etcd at once: each waits for one of a bounded
// number of slots, and a write etcd refused as too many is sent again.
type Gate struct {
	slots chan struct{}
	// lead are the slots of the writes that go ahead of the queue.
	lead chan struct{}
	// waiting counts the callers waiting for a slot.
	waiting atomic.Int64
	// busy counts the writes etcd refused as too many.
	busy atomic.Int64
}

// NewGate returns a gate of slots slots, and leadSlots more for the
// writes that go ahead.
func NewGate(slots int) *Gate {
	return &Gate{slots: make(chan struct{}, slots), lead: make(chan struct{}, leadSlots)}
}

// heldSlot marks a context whose writes use a slot already held (Hold).
type heldSlot struct{}

// leading marks a context whose writes others' work waits on (WithPriority).
type leading struct{}

// WithPriority returns ctx with its writes marked to go ahead of the
// writes queued for the gate's slots: they take one of the lead slots
// while any is free, and queue only when none is.
func WithPriority(ctx context.Context) context.Context {
	return context.WithValue(ctx, leading{}, true)
}

// HasPriority reports whether ctx's writes go ahead of the queue
// (WithPriority).
func HasPriority(ctx context.Context) bool { return ctx.Value(leading{}) != nil }

// Hold takes a slot for all the writes made with the returned context,
// until release is called; with a context that holds one already, it
// takes nothing.
func (g *Gate) Hold(ctx context.Context) (held context.Context, release func(), err error) {
	if ctx.Value(heldSlot{}) != nil {
		return ctx, func() {}, nil
	}
	if HasPriority(ctx) {
		select {
		case g.lead <- struct{}{}:
			return context.WithValue(ctx, heldSlot{}, true), func() { <-g.lead }, nil
		default:
		}
	}
	select {
	case g.slots <- struct{}{}:
	default:
		g.waiting.Add(1)
		select {
		case g.slots <- struct{}{}:
			g.waiting.Add(-1)
		case <-ctx.Done():
			g.waiting.Add(-1)
			return ctx, func() {}, ctx.Err()
		}
	}
	return context.WithValue(ctx, heldSlot{}, true), func() { <-g.slots }, nil
}

// Busy reports whether the writes queue: at least as many wait for a
// slot as there are slots.
func (g *Gate) Busy() bool { return g.waiting.Load() >= int64(cap(g.slots)) }

// Waiting is how many callers wait for a slot.
func (g *Gate) Waiting() int64 { return g.waiting.Load() }

// Holding is how many slots are held, the gate's and the lead ones.
func (g *Gate) Holding() int64 { return int64(len(g.slots) + len(g.lead)) }

// Refused is how many writes etcd refused as too many, each sent again.
func (g *Gate) Refused() int64 { return g.busy.Load() }

// Write runs f, which sends one write request, in a slot (ctx's, if it
// holds one), again after a pause each time etcd refuses it as too many.
func (g *Gate) Write(ctx context.Context, f func() error) error {
	ctx, release, err := g.Hold(ctx)
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
		g.busy.Add(1)
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

// GatedKV is a clientv3.KV whose writes go through a Gate, for the calls
// that are not reads or transactions of a KV: leases, credentials,
// charms' chunks.
type GatedKV struct {
	// KV is the client's KV the calls go to. Tests of package state wrap
	// it to break some.
	KV   clientv3.KV
	gate *Gate
	// put is told of each put's bytes, key and value.
	put func(ctx context.Context, n int)
}

// NewGatedKV returns kv behind gate; put, when not nil, is told the
// bytes of each put that succeeds.
func NewGatedKV(kv clientv3.KV, gate *Gate, put func(ctx context.Context, n int)) *GatedKV {
	return &GatedKV{KV: kv, gate: gate, put: put}
}

func (k *GatedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return k.KV.Get(ctx, key, opts...)
}

func (k *GatedKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	return k.KV.Compact(ctx, rev, opts...)
}

func (k *GatedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	var resp *clientv3.PutResponse
	err := k.gate.Write(ctx, func() (err error) {
		resp, err = k.KV.Put(ctx, key, val, opts...)
		return err
	})
	if err == nil && k.put != nil {
		k.put(ctx, len(key)+len(val))
	}
	return resp, err
}

func (k *GatedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	var resp *clientv3.DeleteResponse
	err := k.gate.Write(ctx, func() (err error) {
		resp, err = k.KV.Delete(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (k *GatedKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	if !writes(op) {
		return k.KV.Do(ctx, op)
	}
	var resp clientv3.OpResponse
	err := k.gate.Write(ctx, func() (err error) {
		resp, err = k.KV.Do(ctx, op)
		return err
	})
	return resp, err
}

func (k *GatedKV) Txn(ctx context.Context) clientv3.Txn {
	return &gatedTxn{Txn: k.KV.Txn(ctx), k: k, ctx: ctx}
}

// gatedTxn is a transaction of GatedKV: committed in a slot when any of
// its operations writes.
type gatedTxn struct {
	clientv3.Txn
	k      *GatedKV
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
	err := t.k.gate.Write(t.ctx, func() (err error) {
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

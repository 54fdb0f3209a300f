package state

import (
	"context"

	"github.com/lifelinehq/lifeline/state/internal/etcdkv"
)

// etcd refuses a write with "etcdserver: too many requests" while the
// entries it has committed run more than 5,000 ahead of those it has
// applied. The State keeps its own writes in flight below that gap, and
// sends one etcd refused anyway again after a short pause: the gate of
// package etcdkv, of Config.MaxWritesInFlight slots.

// DefaultMaxWritesInFlight is how many write requests a State has in
// etcd at once unless its Config says otherwise: a twentieth of the gap
// etcd allows between committed and applied entries, and as many clients
// as the scale harness's raw measurement, which keep etcd busy batching
// writes into each append to its log. More in flight adds nothing but
// waiting in etcd: with 1,000, a write took up to four times as long in
// the harness's bursts.
const DefaultMaxWritesInFlight = 256

// WithPriority returns ctx with its writes marked to go ahead of the
// writes queued for the State's slots: they take one of the lead slots
// while any is free, and queue only when none is. It is for the few writes that
// others wait on: a cascade's batches, the provisioner's, an operator's
// command, while thousands of agents' writes queue; never for an agent's.
func WithPriority(ctx context.Context) context.Context { return etcdkv.WithPriority(ctx) }

// HasPriority reports whether ctx's writes go ahead of the queue
// (WithPriority).
func HasPriority(ctx context.Context) bool { return etcdkv.HasPriority(ctx) }

// hold takes a slot for all the writes made with the returned context,
// until release is called; with a context that holds one already, it
// takes nothing. An operation (State.apply) takes one before its first
// read and holds it for all its attempts: what it read does not age while
// it queues, and a retry after a conflict does not wait again behind
// every write queued since its first (in a burst, 10,000 units leaving a
// relation at once and 5,800 retries, 1% of the departures took over 4 s,
// and some 16, against at most 4 for the calls that never conflict).
func (s *State) hold(ctx context.Context) (held context.Context, release func(), err error) {
	return s.gate.Hold(ctx)
}

// Busy reports whether the State's writes queue: at least as many wait
// for a slot in etcd as there are slots. A caller may then decline work
// that can wait, or need not be done (a unit agent's progress report).
func (s *State) Busy() bool { return s.gate.Busy() }

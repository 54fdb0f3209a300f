// Package watchhub serves the controller's many watch streams from one
// etcd watch of the model.
//
// Without it every agent's watch stream was an etcd watch of its own:
// thousands of watchers, each with its buffers and goroutines in the
// client and in the (embedded) server, and etcd matching every change
// against all of them. The hub instead follows the whole model with one
// watch (state.WatchChanges) and hands each change to the streams that
// want it, found through an index: an exact key's subscribers by a map
// lookup, a prefix's by a lookup of the key's leading part for each
// prefix length in use. The cost of a change is that of the streams that
// want it, not of all streams.
//
// A Stream keeps the contract of state.Watch: whole revisions, in order,
// each batch carrying the revision to resume after; a Reset listing first
// when it starts from nothing. It resumes after a revision given earlier:
//
//   - from the hub's ring of recent events (bounded by events and bytes),
//     without reading etcd, when the ring holds every change after that
//     revision;
//   - otherwise from etcd, as before the hub (state.Watch from that
//     revision, which re-lists when etcd compacted it), until it has
//     caught up with what the ring holds; then it follows the hub.
//
// Each stream's queue is bounded. A stream that falls further behind is
// reset: its queue is dropped and it lists its keys again from etcd at
// the current revision (a Reset batch, which clients already handle after
// a compaction). A listing starts after the stream was registered, and is
// read again until it is at a revision at or past every change the hub
// had handed out then (etcd sends a change a moment before reads can see
// it), and the changes queued meanwhile that the listing already shows
// are dropped: nothing is lost, nothing repeated, revisions only grow.
//
// A stream made through a Budget is charged for what is held for it:
// its queue, what etcd sent ahead of its reader while it catches up, a
// listing read for it by List. A budget may have a parent bounding its
// children together, and the hub may bound all of them (QueueBytes).
// Past a limit the budget is cut: what its streams hold is dropped at
// once, whatever their readers are doing, and each returns a CutError;
// their clients resume after the revisions they last received. Queued
// changes stay in the hub's queue, counted, until a reader takes them, a
// batch at a time.
//
// A stream is read with Next, which waits, by a goroutine of its own; or,
// made with Polled, with TryNext, which does not wait but has the hub call
// a function when there may be news, so that one goroutine serves many
// streams (the controller's WatchMany). A polled stream catching up from
// etcd has a goroutine forwarding etcd's batches, one at a time, until it
// follows the hub.
//
// A mark key (Config.MarkKey) makes the hub tell every stream of each
// write of that key: a stream returns a batch at the mark's revision once
// it has returned the changes queued before it, so that its client knows
// it has seen its subject up to there; a stream catching up from etcd that
// is behind the latest mark lists again instead, since catching up would
// not take it there while its subject is quiet. The controller writes the
// barrier there for ctl wait.
//
// The hub owns no key and writes nothing; it reads through its Source
// (state.State). It knows nothing of what a key means: authorization and
// the meaning of changes are the controller's.
package watchhub

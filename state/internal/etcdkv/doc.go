// Package etcdkv is package state's way to etcd: the only code of state
// that knows etcd's wire types (etcdserverpb) and how fast a request may
// reach the member.
//
// It owns:
//   - the reads: a Get names a key or a range, Read sends gets in one
//     linearizable round trip at one revision, ReadRange one range alone,
//     each answered as a Range of mvccpb.KeyValue records (state's record
//     type), read again while older than Config.AtLeast;
//   - the transactions: Commit sends comparisons (Cond) and writes (Write)
//     as one etcd transaction, built by hand, each part allocated once;
//   - the namespace: every key is prefixed on the way out and unprefixed
//     on the way back;
//   - the gate: a bounded number of writes in etcd at once, the slots of
//     the writes that go ahead (WithPriority), and the pacing of a write
//     sent again after etcd refused it as too many requests (Gate,
//     GatedKV).
//
// Requests go to the member's own handler when the client's KV offers one
// (Remote, as the in-process client of package embedetcd does: reads
// served from the member's store, no socket), else through clientv3's
// retrying KV client over the socket. What the requests mean is the same
// either way; package state's tests run against both (etcdtest's
// -etcdtest.backend).
//
// It knows nothing of the model: which keys exist, what they hold and
// which comparisons a rule needs are package state's (docs/DESIGN.md, "The
// etcd seam").
package etcdkv

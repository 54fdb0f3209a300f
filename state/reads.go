package state

import (
	"context"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// A State's reads go to etcd as range requests it builds itself, with the
// namespace's prefix, and not through clientv3's Op and its namespace
// wrapper: those made each request three times over (an Op, the Op again
// with the prefix, then the request), some 300 MB of the 1,940 MB the
// controller allocated deploying 10,000 units. Transactions that write
// are built the same way (writes.go).

// getOp is one read: a key, or the keys of a range.
type getOp struct {
	key string
	// end is the end of the range, excluded: "" reads key alone, "\x00"
	// every key from key on.
	end      string
	limit    int64
	keysOnly bool
	// countOnly reads how many keys there are, not the keys: for a key
	// alone, whether it exists. etcd answers that from its index, without
	// reading the key from its database.
	countOnly bool
	// rev reads at that revision; the current one when zero.
	rev int64
	// newestFirst sorts the keys by key, descending.
	newestFirst bool
}

// get reads key.
func get(key string) getOp { return getOp{key: key} }

// getKeyOnly reads key without its value: whether it exists, and its
// revisions.
func getKeyOnly(key string) getOp { return getOp{key: key, keysOnly: true} }

// getExists reads whether key exists, from etcd's index alone (exists).
func getExists(key string) getOp { return getOp{key: key, countOnly: true} }

// getPrefix gets up to limit keys with the prefix (all when limit is 0).
func getPrefix(prefix string, limit int64) getOp {
	return getOp{key: rangeStart(prefix, true), end: prefixEnd(prefix), limit: limit}
}

// getKeys gets up to limit keys with the prefix, without their values.
func getKeys(prefix string, limit int64) getOp {
	g := getPrefix(prefix, limit)
	g.keysOnly = true
	return g
}

// getLastKey gets the last key with the prefix, without its value.
func getLastKey(prefix string) getOp {
	g := getKeys(prefix, 1)
	g.newestFirst = true
	return g
}

// remoteKV is what a client's KV may offer to be read without clientv3's
// layers: the member's own handler, in the controller's process
// (package embedetcd).
type remoteKV interface {
	Remote() etcdserverpb.KVClient
}

// remoteOf returns the requests' way to c's cluster.
func remoteOf(c *clientv3.Client) etcdserverpb.KVClient {
	if r, ok := c.KV.(remoteKV); ok {
		return r.Remote()
	}
	return clientv3.RetryKVClient(c)
}

// callOpts are those clientv3 gives each call of its own: wait for the
// connection rather than fail at once, and take an answer of any size.
var callOpts = []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32)}

// reads is the answer to one read round trip: one range per request.
type reads struct {
	rev    int64
	ranges []*etcdserverpb.RangeResponse
}

// read performs the gets in one linearizable round trip at one revision.
func (s *State) read(ctx context.Context, gets ...getOp) (*reads, error) {
	s.stats.reads.Add(1)
	// One allocation for each part of the requests, not three a get.
	ranges := make([]etcdserverpb.RangeRequest, len(gets))
	wraps := make([]etcdserverpb.RequestOp_RequestRange, len(gets))
	ops := make([]etcdserverpb.RequestOp, len(gets))
	req := &etcdserverpb.TxnRequest{Success: make([]*etcdserverpb.RequestOp, len(gets))}
	for i, g := range gets {
		s.fillRange(&ranges[i], g)
		wraps[i].RequestRange = &ranges[i]
		ops[i].Request = &wraps[i]
		req.Success[i] = &ops[i]
	}
	var resp *etcdserverpb.TxnResponse
	err := s.atLeast(ctx, func() (rev int64, err error) {
		resp, err = s.remote.Txn(ctx, req, callOpts...)
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	})
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	r := &reads{rev: resp.Header.Revision, ranges: make([]*etcdserverpb.RangeResponse, len(resp.Responses))}
	for i, op := range resp.Responses {
		rr := op.GetResponseRange()
		s.unprefix(rr.Kvs)
		r.ranges[i] = rr
	}
	return r, nil
}

// readRange reads one range on its own.
func (s *State) readRange(ctx context.Context, g getOp) (*etcdserverpb.RangeResponse, error) {
	s.stats.reads.Add(1)
	var req etcdserverpb.RangeRequest
	s.fillRange(&req, g)
	var resp *etcdserverpb.RangeResponse
	err := s.atLeast(ctx, func() (rev int64, err error) {
		resp, err = s.remote.Range(ctx, &req, callOpts...)
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	})
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	s.unprefix(resp.Kvs)
	return resp, nil
}

// atLeast runs read, which returns the revision it read at, until that is
// at or past Config.AtLeast's as it was before the first read. etcd hands
// a write's change to its watchers a moment before the write is visible
// to reads (its watchable store notifies, then ends the write): a machine
// agent handed new units by the controller's watch hub asked for their
// credentials in that moment, was told they did not exist, and started
// them two seconds later, the deploy's last. The moment is short; the
// pause before each read again doubles from 100 µs to at most 10 ms, and
// after maxReadsAgain the last read stands (should etcd's revision ever
// go back, restored from an older backup under a running controller,
// reads go on).
func (s *State) atLeast(ctx context.Context, read func() (int64, error)) error {
	var need int64
	if s.cfg.AtLeast != nil {
		need = s.cfg.AtLeast()
	}
	for i, wait := 0, 100*time.Microsecond; ; i, wait = i+1, min(2*wait, 10*time.Millisecond) {
		rev, err := read()
		if err != nil || rev >= need || i == maxReadsAgain {
			return err
		}
		s.stats.readsAgain.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// maxReadsAgain bounds how often atLeast reads again: about 43 ms of
// pauses in all.
const maxReadsAgain = 10

// fillRange makes r the request of g, in the State's namespace.
func (s *State) fillRange(r *etcdserverpb.RangeRequest, g getOp) {
	r.Key, r.RangeEnd = s.interval(g.key, g.end)
	r.Limit, r.KeysOnly, r.CountOnly, r.Revision = g.limit, g.keysOnly, g.countOnly, g.rev
	if g.newestFirst {
		r.SortOrder, r.SortTarget = etcdserverpb.RangeRequest_DESCEND, etcdserverpb.RangeRequest_KEY
	}
}

// interval is the key and range end of a request for the keys from key
// up to end, in the State's namespace: end "" is key alone, "\x00" every
// key from key on.
func (s *State) interval(key, end string) ([]byte, []byte) {
	ns := s.cfg.Namespace
	k := append(append(make([]byte, 0, len(ns)+len(key)), ns...), key...)
	switch {
	case end == "":
		return k, nil
	case end == "\x00" && ns != "":
		// Every key from key on, within the namespace.
		return k, []byte(prefixEnd(ns))
	case end == "\x00":
		return k, []byte{0}
	default:
		return k, append(append(make([]byte, 0, len(ns)+len(end)), ns...), end...)
	}
}

// unprefix takes the namespace off the keys read.
func (s *State) unprefix(kvs []*mvccpb.KeyValue) {
	n := len(s.cfg.Namespace)
	if n == 0 {
		return
	}
	for _, kv := range kvs {
		kv.Key = kv.Key[n:]
	}
}

// one returns the single key of range i, or nil.
func (r *reads) one(i int) *mvccpb.KeyValue {
	if kvs := r.ranges[i].Kvs; len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// all returns the keys of range i.
func (r *reads) all(i int) []*mvccpb.KeyValue { return r.ranges[i].Kvs }

// from returns the answers from the i-th on, numbered from 0.
func (r *reads) from(i int) *reads { return &reads{rev: r.rev, ranges: r.ranges[i:]} }

// existing returns, of keys, those that the answers of their getExists
// reads, from i on and in keys' order, found: each as a KeyValue of its
// key alone.
func (r *reads) existing(i int, keys []string) []*mvccpb.KeyValue {
	var out []*mvccpb.KeyValue
	for j, k := range keys {
		if r.ranges[i+j].Count > 0 {
			out = append(out, &mvccpb.KeyValue{Key: []byte(k)})
		}
	}
	return out
}

// more reports whether range i was cut short by its limit.
func (r *reads) more(i int) bool { return r.ranges[i].More }

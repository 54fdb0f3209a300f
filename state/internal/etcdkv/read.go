package etcdkv

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reads go to etcd as range requests built here, with the namespace's
// prefix, and not through clientv3's Op and its namespace wrapper: those
// made each request three times over (an Op, the Op again with the
// prefix, then the request), some 300 MB of the 1,940 MB the controller
// allocated deploying 10,000 units. Transactions that write are built the
// same way (txn.go).

// Get is one read: a key, or the keys of a range.
type Get struct {
	Key string
	// End is the end of the range, excluded: "" reads Key alone, "\x00"
	// every key from Key on.
	End      string
	Limit    int64
	KeysOnly bool
	// CountOnly reads how many keys there are, not the keys: for a key
	// alone, whether it exists. etcd answers that from its index, without
	// reading the key from its database.
	CountOnly bool
	// Rev reads at that revision; the current one when zero.
	Rev int64
	// NewestFirst sorts the keys by key, descending.
	NewestFirst bool
}

// Key reads key.
func Key(key string) Get { return Get{Key: key} }

// KeyOnly reads key without its value: whether it exists, and its
// revisions.
func KeyOnly(key string) Get { return Get{Key: key, KeysOnly: true} }

// Exists reads whether key exists, from etcd's index alone.
func Exists(key string) Get { return Get{Key: key, CountOnly: true} }

// Count reads how many keys have the prefix, from etcd's index alone.
func Count(prefix string) Get { return Get{Key: prefix, End: PrefixEnd(prefix), CountOnly: true} }

// Prefix gets up to limit keys with the prefix (all when limit is 0).
func Prefix(prefix string, limit int64) Get {
	return Get{Key: RangeStart(prefix, true), End: PrefixEnd(prefix), Limit: limit}
}

// Keys gets up to limit keys with the prefix, without their values.
func Keys(prefix string, limit int64) Get {
	g := Prefix(prefix, limit)
	g.KeysOnly = true
	return g
}

// LastKey gets the last key with the prefix, without its value.
func LastKey(prefix string) Get {
	g := Keys(prefix, 1)
	g.NewestFirst = true
	return g
}

// PrefixEnd is the end of the range of the keys with the prefix: the
// first key after them all.
func PrefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// RangeStart is the first key of a read of key, or of the keys under it
// with prefix: the key itself, but for the empty prefix.
func RangeStart(key string, prefix bool) string {
	if prefix && key == "" {
		return "\x00"
	}
	return key
}

// Range is the answer to one Get, its keys without the namespace.
type Range struct {
	// Rev is the revision the range was read at.
	Rev int64
	Kvs []*mvccpb.KeyValue
	// More says the range was cut short by its limit.
	More bool
	// Count is how many keys the range has, whatever its limit.
	Count int64
}

// Read performs the gets in one linearizable round trip at one revision,
// and returns that revision and the answer to each get in order.
func (k *KV) Read(ctx context.Context, gets ...Get) (int64, []Range, error) {
	k.reads.Add(1)
	// One allocation for each part of the requests, not three a get.
	ranges := make([]etcdserverpb.RangeRequest, len(gets))
	wraps := make([]etcdserverpb.RequestOp_RequestRange, len(gets))
	ops := make([]etcdserverpb.RequestOp, len(gets))
	req := &etcdserverpb.TxnRequest{Success: make([]*etcdserverpb.RequestOp, len(gets))}
	for i, g := range gets {
		k.fillRange(&ranges[i], g)
		wraps[i].RequestRange = &ranges[i]
		ops[i].Request = &wraps[i]
		req.Success[i] = &ops[i]
	}
	var resp *etcdserverpb.TxnResponse
	err := k.atLeast(ctx, func() (rev int64, err error) {
		resp, err = k.Remote.Txn(ctx, req, callOpts...)
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	})
	if err != nil {
		return 0, nil, clientv3.ContextError(ctx, err)
	}
	rev := resp.Header.Revision
	out := make([]Range, len(resp.Responses))
	for i, op := range resp.Responses {
		rr := op.GetResponseRange()
		k.unprefix(rr.Kvs)
		out[i] = Range{Rev: rev, Kvs: rr.Kvs, More: rr.More, Count: rr.Count}
	}
	return rev, out, nil
}

// ReadRange reads one range on its own.
func (k *KV) ReadRange(ctx context.Context, g Get) (*Range, error) {
	k.reads.Add(1)
	var req etcdserverpb.RangeRequest
	k.fillRange(&req, g)
	var resp *etcdserverpb.RangeResponse
	err := k.atLeast(ctx, func() (rev int64, err error) {
		resp, err = k.Remote.Range(ctx, &req, callOpts...)
		if err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	})
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	k.unprefix(resp.Kvs)
	return &Range{Rev: resp.Header.Revision, Kvs: resp.Kvs, More: resp.More, Count: resp.Count}, nil
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
func (k *KV) atLeast(ctx context.Context, read func() (int64, error)) error {
	var need int64
	if k.cfg.AtLeast != nil {
		need = k.cfg.AtLeast()
	}
	for i, wait := 0, 100*time.Microsecond; ; i, wait = i+1, min(2*wait, 10*time.Millisecond) {
		rev, err := read()
		if err != nil || rev >= need || i == maxReadsAgain {
			return err
		}
		k.readsAgain.Add(1)
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

// fillRange makes r the request of g, in the namespace.
func (k *KV) fillRange(r *etcdserverpb.RangeRequest, g Get) {
	r.Key, r.RangeEnd = k.interval(g.Key, g.End)
	r.Limit, r.KeysOnly, r.CountOnly, r.Revision = g.Limit, g.KeysOnly, g.CountOnly, g.Rev
	if g.NewestFirst {
		r.SortOrder, r.SortTarget = etcdserverpb.RangeRequest_DESCEND, etcdserverpb.RangeRequest_KEY
	}
}

// interval is the key and range end of a request for the keys from key
// up to end, in the namespace: end "" is key alone, "\x00" every key from
// key on.
func (k *KV) interval(key, end string) ([]byte, []byte) {
	ns := k.cfg.Namespace
	b := append(append(make([]byte, 0, len(ns)+len(key)), ns...), key...)
	switch {
	case end == "":
		return b, nil
	case end == "\x00" && ns != "":
		// Every key from key on, within the namespace.
		return b, []byte(PrefixEnd(ns))
	case end == "\x00":
		return b, []byte{0}
	default:
		return b, append(append(make([]byte, 0, len(ns)+len(end)), ns...), end...)
	}
}

// unprefix takes the namespace off the keys read.
func (k *KV) unprefix(kvs []*mvccpb.KeyValue) {
	n := len(k.cfg.Namespace)
	if n == 0 {
		return
	}
	for _, kv := range kvs {
		kv.Key = kv.Key[n:]
	}
}

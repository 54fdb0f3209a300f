package etcdkv

import (
	"context"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Cond is one comparison of a transaction: the create or mod revision of
// a key, or of every key of a range, against Rev. A create revision of 0
// is a key that does not exist.
type Cond struct {
	Key, End string // End: "" for Key alone
	Mod      bool   // the mod revision, else the create revision
	Result   Result
	Rev      int64
}

// Result is how a Cond compares a revision with its Rev.
type Result int

// The comparisons of a Cond.
const (
	Equal Result = iota
	Greater
	Less
)

var results = [...]etcdserverpb.Compare_CompareResult{
	Equal:   etcdserverpb.Compare_EQUAL,
	Greater: etcdserverpb.Compare_GREATER,
	Less:    etcdserverpb.Compare_LESS,
}

// Write is one write of a transaction: a put, or the deletion of a key or
// of the keys of a range.
type Write struct {
	Key, End string // End: "" for Key alone
	Value    []byte
	Del      bool
	Lease    int64 // the lease a put binds its key to; 0 for none
}

// Commit sends the writes, to be made if every comparison holds, as one
// transaction in a slot of the gate (Gate.Write), and reports whether the
// comparisons held and the revision the transaction was answered at: the
// revision of its writes when it wrote.
func (k *KV) Commit(ctx context.Context, cmps []Cond, writes []Write) (bool, int64, error) {
	req := k.txnRequest(cmps, writes)
	var resp *etcdserverpb.TxnResponse
	err := k.gate.Write(ctx, func() (err error) {
		resp, err = k.Remote.Txn(ctx, req, callOpts...)
		return clientv3.ContextError(ctx, err)
	})
	if err != nil {
		return false, 0, err
	}
	return resp.Succeeded, resp.GetHeader().GetRevision(), nil
}

// txnRequest is the transaction in the namespace, each part of it
// allocated once for all its comparisons or writes.
func (k *KV) txnRequest(cs []Cond, ws []Write) *etcdserverpb.TxnRequest {
	nmod, ndel := 0, 0
	for _, x := range cs {
		if x.Mod {
			nmod++
		}
	}
	for _, w := range ws {
		if w.Del {
			ndel++
		}
	}
	req := &etcdserverpb.TxnRequest{
		Compare: make([]*etcdserverpb.Compare, len(cs)),
		Success: make([]*etcdserverpb.RequestOp, len(ws)),
	}
	cmps := make([]etcdserverpb.Compare, len(cs))
	mods := make([]etcdserverpb.Compare_ModRevision, 0, nmod)
	creates := make([]etcdserverpb.Compare_CreateRevision, 0, len(cs)-nmod)
	for i, x := range cs {
		p := &cmps[i]
		p.Key, p.RangeEnd = k.interval(x.Key, x.End)
		p.Result = results[x.Result]
		if x.Mod {
			m := grow(&mods)
			m.ModRevision = x.Rev
			p.Target, p.TargetUnion = etcdserverpb.Compare_MOD, m
		} else {
			cr := grow(&creates)
			cr.CreateRevision = x.Rev
			p.Target, p.TargetUnion = etcdserverpb.Compare_CREATE, cr
		}
		req.Compare[i] = p
	}
	ops := make([]etcdserverpb.RequestOp, len(ws))
	puts := make([]etcdserverpb.PutRequest, 0, len(ws)-ndel)
	putOps := make([]etcdserverpb.RequestOp_RequestPut, 0, len(ws)-ndel)
	dels := make([]etcdserverpb.DeleteRangeRequest, 0, ndel)
	delOps := make([]etcdserverpb.RequestOp_RequestDeleteRange, 0, ndel)
	for i, w := range ws {
		key, end := k.interval(w.Key, w.End)
		if w.Del {
			d := grow(&dels)
			d.Key, d.RangeEnd = key, end
			o := grow(&delOps)
			o.RequestDeleteRange = d
			ops[i].Request = o
		} else {
			p := grow(&puts)
			p.Key, p.Value, p.Lease = key, w.Value, w.Lease
			o := grow(&putOps)
			o.RequestPut = p
			ops[i].Request = o
		}
		req.Success[i] = &ops[i]
	}
	return req
}

// grow extends *s by one zero element, within its capacity, and returns
// it: the elements' addresses stay good.
func grow[T any](s *[]T) *T {
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

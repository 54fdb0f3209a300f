package state

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// An operation's transaction goes to etcd as a request the State builds
// itself, as its reads do (reads.go), in its slot of the gate
// (backpressure.go).

// change is what one attempt decided: the comparisons that must still hold
// for the decision to be right, and the writes that carry it out.
type change struct {
	cmps []condition
	ops  []write
	// auditSeq is the seq of the audit entry among ops, if any (audit.go).
	auditSeq int64
}

// condition is one comparison of a change: the create or mod revision of a key,
// or of every key of a range, against rev.
type condition struct {
	key, end string // end: "" for key alone
	mod      bool   // the mod revision, else the create revision
	result   etcdserverpb.Compare_CompareResult
	rev      int64
}

// write is one write of a change: a put, or the deletion of a key or of
// the keys of a range.
type write struct {
	key, end string // end: "" for key alone
	value    []byte
	del      bool
	lease    int64 // the lease a put binds its key to; 0 for none
}

// ifMod asserts that key is unchanged since it was read at modRev; a zero
// modRev asserts that key is absent.
func (c *change) ifMod(key string, modRev int64) {
	if modRev == 0 {
		c.ifAbsent(key)
		return
	}
	c.cmps = append(c.cmps, condition{key: key, mod: true, result: etcdserverpb.Compare_EQUAL, rev: modRev})
}

// ifAbsent asserts that key does not exist.
func (c *change) ifAbsent(key string) {
	c.cmps = append(c.cmps, condition{key: key, result: etcdserverpb.Compare_EQUAL})
}

// ifSame asserts that key still exists as the incarnation created at
// createRev, whatever has been written to it since. It keeps a witness:
// "this prefix is not empty" stays true while the witness exists.
func (c *change) ifSame(key string, createRev int64) {
	c.cmps = append(c.cmps, condition{key: key, result: etcdserverpb.Compare_EQUAL, rev: createRev})
}

// ifExists asserts that key exists, whatever its incarnation. It keeps a
// witness read by getExists: "this prefix is not empty" holds while any
// key under it exists when the change commits, and a key read as there
// and still there, or there again, is one.
func (c *change) ifExists(key string) {
	c.cmps = append(c.cmps, condition{key: key, result: etcdserverpb.Compare_GREATER})
}

// ifEmpty asserts that no key has the prefix.
func (c *change) ifEmpty(prefix string) {
	c.cmps = append(c.cmps, condition{key: prefix, end: prefixEnd(prefix), result: etcdserverpb.Compare_EQUAL})
}

// ifOnly asserts that key is the only key with the prefix.
func (c *change) ifOnly(prefix, key string) {
	c.cmps = append(c.cmps,
		condition{key: prefix, end: key, result: etcdserverpb.Compare_EQUAL},
		condition{key: key + "\x00", end: prefixEnd(prefix), result: etcdserverpb.Compare_EQUAL},
	)
}

// ifNoNewer asserts that no key with the prefix was created or changed after
// revision rev: the set read at rev has not grown.
func (c *change) ifNoNewer(prefix string, rev int64) {
	c.cmps = append(c.cmps, condition{key: prefix, end: prefixEnd(prefix), mod: true, result: etcdserverpb.Compare_LESS, rev: rev + 1})
}

func (c *change) put(key string, m proto.Message) {
	c.ops = append(c.ops, write{key: key, value: mustMarshal(m)})
}

// putLeased puts m at key bound to lease: the key goes when the lease ends.
func (c *change) putLeased(key string, m proto.Message, lease int64) {
	c.ops = append(c.ops, write{key: key, value: mustMarshal(m), lease: lease})
}

func (c *change) putRaw(key, value string) {
	c.ops = append(c.ops, write{key: key, value: []byte(value)})
}

func (c *change) del(key string) {
	c.ops = append(c.ops, write{key: key, del: true})
}

func (c *change) delPrefix(prefix string) {
	c.ops = append(c.ops, write{key: prefix, end: prefixEnd(prefix), del: true})
}

// delRange deletes the keys from start up to end, excluded.
func (c *change) delRange(start, end string) {
	c.ops = append(c.ops, write{key: start, end: end, del: true})
}

func (c *change) size() int { return len(c.cmps) + len(c.ops) }

func (c *change) empty() bool { return len(c.ops) == 0 }

// bytes is what c's puts write: their keys and values.
func (c *change) bytes() int {
	n := 0
	for _, w := range c.ops {
		if !w.del {
			n += len(w.key) + len(w.value)
		}
	}
	return n
}

// clone returns a copy of c that can be added to without changing c.
func (c *change) clone() *change {
	return &change{cmps: slices.Clone(c.cmps), ops: slices.Clone(c.ops), auditSeq: c.auditSeq}
}

// commit commits c, reporting whether its comparisons held.
func (s *State) commit(ctx context.Context, c *change) (bool, error) {
	ok, _, err := s.commitAt(ctx, c)
	return ok, err
}

// commitAt is commit, returning too the revision the transaction was
// answered at: the revision of its writes when it wrote. It is for the
// changes made without apply, which commit once. In an operator's call
// (an audited context) it writes the call's audit entry with the call's
// first change, as apply does (audit.go): when the transaction fails
// because another entry took the seq, it is tried again with the next
// one, so that false still means that c's own comparisons failed.
func (s *State) commitAt(ctx context.Context, c *change) (bool, int64, error) {
	if c.empty() {
		return true, 0, nil
	}
	a := auditOf(ctx)
	if a == nil {
		return s.commitRev(ctx, c)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seq != 0 {
		ok, rev, err := s.commitRev(ctx, c)
		if ok {
			a.commits = append(a.commits, rev)
		}
		return ok, rev, err
	}
	for i := 0; i < s.cfg.MaxAttempts; i++ {
		audited := c.clone()
		if err := s.attachAudit(ctx, audited, a); err != nil {
			return false, 0, err
		}
		ok, rev, err := s.commitRev(ctx, audited)
		if err != nil {
			return false, 0, err
		}
		if ok {
			a.seq = audited.auditSeq
			a.commits = append(a.commits, rev)
			return true, rev, nil
		}
		last, err := s.AuditSeq(ctx)
		if err != nil {
			return false, 0, err
		}
		if last == audited.auditSeq-1 {
			// The audit log's seq held (it only grows): c's own
			// comparisons failed.
			return false, rev, nil
		}
		s.stats.conflict()
	}
	s.stats.aborted.Add(1)
	return false, 0, fmt.Errorf("write the audit entry of %s: %w", a.rpc(), ErrAborted)
}

// commitRev commits c, reporting whether its comparisons held and, when
// they did, the revision it committed at.
func (s *State) commitRev(ctx context.Context, c *change) (bool, int64, error) {
	if c.empty() {
		return true, 0, nil
	}
	n := int64(c.size())
	if n > MaxTxnOps {
		// A programming error: every operation bounds its batches.
		panic(fmt.Sprintf("state: transaction of %d operations exceeds %d", n, MaxTxnOps))
	}
	for {
		cur := s.stats.maxOps.Load()
		if n <= cur || s.stats.maxOps.CompareAndSwap(cur, n) {
			break
		}
	}
	if n := c.bytes(); n > MaxTxnBytes {
		return false, 0, tooLarge("a transaction's writes", n, MaxTxnBytes)
	}
	req := s.txnRequest(c)
	var resp *etcdserverpb.TxnResponse
	deleting := s.deleting.add(c)
	defer s.deleting.done(deleting)
	err := s.gate.write(ctx, func() (err error) {
		resp, err = s.remote.Txn(ctx, req, callOpts...)
		return clientv3.ContextError(ctx, err)
	})
	if err != nil {
		return false, 0, err
	}
	if resp.Succeeded {
		s.stats.txns.Add(1)
		metered(ctx, c.bytes())
	}
	return resp.Succeeded, resp.GetHeader().GetRevision(), nil
}

// txnRequest is c's transaction in the State's namespace, each part of it
// allocated once for all its comparisons or writes.
func (s *State) txnRequest(c *change) *etcdserverpb.TxnRequest {
	nmod, ndel := 0, 0
	for _, x := range c.cmps {
		if x.mod {
			nmod++
		}
	}
	for _, w := range c.ops {
		if w.del {
			ndel++
		}
	}
	req := &etcdserverpb.TxnRequest{
		Compare: make([]*etcdserverpb.Compare, len(c.cmps)),
		Success: make([]*etcdserverpb.RequestOp, len(c.ops)),
	}
	cmps := make([]etcdserverpb.Compare, len(c.cmps))
	mods := make([]etcdserverpb.Compare_ModRevision, 0, nmod)
	creates := make([]etcdserverpb.Compare_CreateRevision, 0, len(c.cmps)-nmod)
	for i, x := range c.cmps {
		p := &cmps[i]
		p.Key, p.RangeEnd = s.interval(x.key, x.end)
		p.Result = x.result
		if x.mod {
			m := grow(&mods)
			m.ModRevision = x.rev
			p.Target, p.TargetUnion = etcdserverpb.Compare_MOD, m
		} else {
			cr := grow(&creates)
			cr.CreateRevision = x.rev
			p.Target, p.TargetUnion = etcdserverpb.Compare_CREATE, cr
		}
		req.Compare[i] = p
	}
	ops := make([]etcdserverpb.RequestOp, len(c.ops))
	puts := make([]etcdserverpb.PutRequest, 0, len(c.ops)-ndel)
	putOps := make([]etcdserverpb.RequestOp_RequestPut, 0, len(c.ops)-ndel)
	dels := make([]etcdserverpb.DeleteRangeRequest, 0, ndel)
	delOps := make([]etcdserverpb.RequestOp_RequestDeleteRange, 0, ndel)
	for i, w := range c.ops {
		key, end := s.interval(w.key, w.end)
		if w.del {
			d := grow(&dels)
			d.Key, d.RangeEnd = key, end
			o := grow(&delOps)
			o.RequestDeleteRange = d
			ops[i].Request = o
		} else {
			p := grow(&puts)
			p.Key, p.Value, p.Lease = key, w.value, w.lease
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

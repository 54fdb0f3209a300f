package state

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/state/internal/etcdkv"
)

// An operation's transaction is a change: the comparisons and writes of
// package etcdkv, which builds the request and sends it in the State's
// namespace, in its slot of the gate (backpressure.go).

// change is what one attempt decided: the comparisons that must still hold
// for the decision to be right, and the writes that carry it out.
type change struct {
	cmps []etcdkv.Cond
	ops  []etcdkv.Write
	// auditSeq is the seq of the audit entry among ops, if any (audit.go).
	auditSeq int64
}

// ifMod asserts that key is unchanged since it was read at modRev; a zero
// modRev asserts that key is absent.
func (c *change) ifMod(key string, modRev int64) {
	if modRev == 0 {
		c.ifAbsent(key)
		return
	}
	c.cmps = append(c.cmps, etcdkv.Cond{Key: key, Mod: true, Result: etcdkv.Equal, Rev: modRev})
}

// ifAbsent asserts that key does not exist.
func (c *change) ifAbsent(key string) {
	c.cmps = append(c.cmps, etcdkv.Cond{Key: key, Result: etcdkv.Equal})
}

// ifSame asserts that key still exists as the incarnation created at
// createRev, whatever has been written to it since. It keeps a witness:
// "this prefix is not empty" stays true while the witness exists.
func (c *change) ifSame(key string, createRev int64) {
	c.cmps = append(c.cmps, etcdkv.Cond{Key: key, Result: etcdkv.Equal, Rev: createRev})
}

// ifExists asserts that key exists, whatever its incarnation. It keeps a
// witness read by getExists: "this prefix is not empty" holds while any
// key under it exists when the change commits, and a key read as there
// and still there, or there again, is one.
func (c *change) ifExists(key string) {
	c.cmps = append(c.cmps, etcdkv.Cond{Key: key, Result: etcdkv.Greater})
}

// ifEmpty asserts that no key has the prefix.
func (c *change) ifEmpty(prefix string) {
	c.cmps = append(c.cmps, etcdkv.Cond{Key: prefix, End: prefixEnd(prefix), Result: etcdkv.Equal})
}

// ifOnly asserts that key is the only key with the prefix.
func (c *change) ifOnly(prefix, key string) {
	c.cmps = append(c.cmps,
		etcdkv.Cond{Key: prefix, End: key, Result: etcdkv.Equal},
		etcdkv.Cond{Key: key + "\x00", End: prefixEnd(prefix), Result: etcdkv.Equal},
	)
}

// ifNoNewer asserts that no key with the prefix was created or changed after
// revision rev: the set read at rev has not grown.
func (c *change) ifNoNewer(prefix string, rev int64) {
	c.cmps = append(c.cmps, etcdkv.Cond{Key: prefix, End: prefixEnd(prefix), Mod: true, Result: etcdkv.Less, Rev: rev + 1})
}

func (c *change) put(key string, m proto.Message) {
	c.ops = append(c.ops, etcdkv.Write{Key: key, Value: mustMarshal(m)})
}

// putLeased puts m at key bound to lease: the key goes when the lease ends.
func (c *change) putLeased(key string, m proto.Message, lease int64) {
	c.ops = append(c.ops, etcdkv.Write{Key: key, Value: mustMarshal(m), Lease: lease})
}

func (c *change) putRaw(key, value string) {
	c.ops = append(c.ops, etcdkv.Write{Key: key, Value: []byte(value)})
}

func (c *change) del(key string) {
	c.ops = append(c.ops, etcdkv.Write{Key: key, Del: true})
}

func (c *change) delPrefix(prefix string) {
	c.ops = append(c.ops, etcdkv.Write{Key: prefix, End: prefixEnd(prefix), Del: true})
}

// delRange deletes the keys from start up to end, excluded.
func (c *change) delRange(start, end string) {
	c.ops = append(c.ops, etcdkv.Write{Key: start, End: end, Del: true})
}

func (c *change) size() int { return len(c.cmps) + len(c.ops) }

func (c *change) empty() bool { return len(c.ops) == 0 }

// bytes is what c's puts write: their keys and values.
func (c *change) bytes() int {
	n := 0
	for _, w := range c.ops {
		if !w.Del {
			n += len(w.Key) + len(w.Value)
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
		ok, rev, err := s.commitAudited(ctx, audited, a)
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
	deleting := s.deleting.add(c)
	defer s.deleting.done(deleting)
	ok, rev, err := s.etcd.Commit(ctx, c.cmps, c.ops)
	if err != nil {
		return false, 0, err
	}
	if ok {
		s.stats.txns.Add(1)
		metered(ctx, c.bytes())
	}
	return ok, rev, nil
}

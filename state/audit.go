package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The audit log is audit/<seq>, one entry an operator's call that changed
// something or was refused, seq counting from 1 without gaps (seq/audit
// holds the last one given; 20 digits, so that the keys sort by number).
//
// An entry of a call that changes the model is written by the transaction
// of the call's first change, which also compares and bumps seq/audit: a
// change without its entry cannot commit, and a crash cannot come between
// them (O3). The call's later transactions (the units of a deploy, the
// batches of a destroy of many machines) carry no entry of their own: they
// are made after the first committed, by the same call, and its entry
// covers them. The entry is written pending; the call's result (its gRPC
// code and message) is filled in once it ends. A call refused before it
// changed anything gets a whole entry after the refusal. Every audited
// change compares seq/audit, so two operators' changes committing at once
// conflict and one is tried again; within one controller they queue for
// the seq instead (commitAudited).
const (
	auditPrefix = "audit/"
	seqAudit    = seqPrefix + "audit"
)

// AuditPrefix is where the entries are, for watching them, and
// AuditSeqKey the key of the last seq given, which every new entry
// changes.
const (
	AuditPrefix = auditPrefix
	AuditSeqKey = seqAudit
)

// auditSeqDigits is how many digits an entry's seq has in its key.
const auditSeqDigits = 20

// AuditKey is the key of entry seq.
func AuditKey(seq int64) string {
	return fmt.Sprintf("%s%0*d", auditPrefix, auditSeqDigits, seq)
}

// parseAuditKey returns the seq of an entry's key.
func parseAuditKey(key string) (int64, error) {
	rest := strings.TrimPrefix(key, auditPrefix)
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || len(rest) != auditSeqDigits || n < 1 {
		return 0, fmt.Errorf("audit key %q: want audit/<seq of %d digits>", key, auditSeqDigits)
	}
	return n, nil
}

// auditOps is what an entry adds to its change's transaction: seq/audit
// compared and written, and the entry.
const auditOps = 3

// The bounds of an entry, which keep it under 8 KiB: the targets it
// names and their length, and the length of its summary and message.
const (
	MaxAuditTargets    = 32
	maxAuditTargetLen  = 128
	maxAuditTextLength = 1024
)

// Audit is the audit of one call: the entry it makes, and what it
// committed. A caller makes one for each call (NewAudit) and passes it
// with the context of the State's methods the call uses (WithAudit); once
// the call ends, FinishAudit records its result.
type Audit struct {
	// mu is held by the call's operations while they commit, one at a
	// time, so that exactly one of them writes the entry.
	mu    sync.Mutex
	entry *pb.AuditEntry
	// seq is the entry's, once a change wrote it.
	seq int64
	// commits are the revisions of the call's transactions.
	commits []int64
	// late are the targets added once the entry was written.
	late []string
}

// NewAudit returns the audit of a call whose entry is e (its user, rpc,
// targets, summary, controller; the rest is filled in as it is written).
func NewAudit(e *pb.AuditEntry) *Audit {
	e = protoClone(e)
	boundEntry(e)
	return &Audit{entry: e}
}

// AddTargets adds to the entities the entry names. Those added once the
// entry is written (an entity the call's first change made, known only
// then) are written with the call's result (FinishAudit).
func (a *Audit) AddTargets(targets ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seq == 0 {
		a.entry.Targets = append(a.entry.Targets, targets...)
		boundEntry(a.entry)
		return
	}
	a.late = append(a.late, targets...)
	if len(a.late) > MaxAuditTargets {
		a.late = a.late[:MaxAuditTargets]
	}
}

// SetUnrecorded notes, until the entry is written, how many of the user's
// refused calls before this one were not recorded each.
func (a *Audit) SetUnrecorded(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seq == 0 {
		a.entry.Unrecorded = n
	}
}

// Seq is the seq of the entry the call's first change wrote; 0 when it
// changed nothing.
func (a *Audit) Seq() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seq
}

// Commits returns the revisions of the transactions the call committed,
// in order.
func (a *Audit) Commits() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int64(nil), a.commits...)
}

// rpc names the call, for errors.
func (a *Audit) rpc() string { return a.entry.Rpc }

type auditKey struct{}

// WithAudit returns ctx carrying a: every change made with it is the call's.
func WithAudit(ctx context.Context, a *Audit) context.Context {
	return context.WithValue(ctx, auditKey{}, a)
}

// withoutAudit returns ctx carrying no audit: for the writes made for
// several callers at once (a reservation of numbers), and for the entries'
// own.
func withoutAudit(ctx context.Context) context.Context {
	if auditOf(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, auditKey{}, (*Audit)(nil))
}

// AuditFrom returns the audit ctx carries, nil if none: for a call's
// handler to add the targets it learns as it goes (AddTargets).
func AuditFrom(ctx context.Context) *Audit { return auditOf(ctx) }

func auditOf(ctx context.Context) *Audit {
	a, _ := ctx.Value(auditKey{}).(*Audit)
	return a
}

// boundEntry cuts an entry's targets and texts to their bounds.
func boundEntry(e *pb.AuditEntry) {
	if n := len(e.Targets); n > MaxAuditTargets {
		e.Targets = append(e.Targets[:MaxAuditTargets-1:MaxAuditTargets-1], fmt.Sprintf("(%d more)", n-MaxAuditTargets+1))
	}
	for i, t := range e.Targets {
		e.Targets[i] = cutText(t, maxAuditTargetLen)
	}
	e.User = cutText(e.User, maxAuditTargetLen)
	e.Rpc = cutText(e.Rpc, maxAuditTargetLen)
	e.Controller = cutText(e.Controller, maxAuditTargetLen)
	e.Summary = cutText(e.Summary, maxAuditTextLength)
	e.Message = cutText(e.Message, maxAuditTextLength)
}

// cutText cuts s to at most n bytes, on a character's boundary, marking
// the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// commitAudited commits c, the first change of a's call, with a's entry
// pending under the next seq. It holds this process's lock of seq/audit
// from reading the seq to the commit: every audited change compares
// seq/audit, and the controller's concurrent operator calls (a script
// adding units to a thousand machines, sixteen at a time) would otherwise
// collide on it in etcd, each collision a failed transaction through
// raft and the call's reads made again; queued, each takes the next seq
// in turn (keyLocks). Writers elsewhere (another controller, a refused
// call's entry) are still caught by the comparison.
func (s *State) commitAudited(ctx context.Context, c *change, a *Audit) (bool, int64, error) {
	unlock, err := s.hot.lock(ctx, seqAudit)
	if err != nil {
		return false, 0, err
	}
	defer unlock()
	if err := s.attachAudit(ctx, c, a); err != nil {
		return false, 0, err
	}
	return s.commitRev(ctx, c)
}

// attachAudit adds a's entry, pending, to c, the change about to be
// committed as the call's first, with the next seq.
func (s *State) attachAudit(ctx context.Context, c *change, a *Audit) error {
	if n := c.size() + auditOps; n > MaxTxnOps {
		// A programming error: every operator's operation leaves room.
		return fmt.Errorf("state: an audited transaction of %d operations exceeds %d", n, MaxTxnOps)
	}
	r, err := s.read(ctx, get(seqAudit))
	if err != nil {
		return err
	}
	last, rev, err := seqValue(r.one(0))
	if err != nil {
		return err
	}
	e := protoClone(a.entry)
	e.Seq, e.UnixNano, e.Changed, e.Pending = last+1, s.now().UnixNano(), true, true
	c.ifMod(seqAudit, rev)
	c.putRaw(seqAudit, strconv.FormatInt(e.Seq, 10))
	c.put(AuditKey(e.Seq), e)
	c.auditSeq = e.Seq
	return nil
}

// FinishAudit records how a's call ended: code (a gRPC status code) and
// message. The entry of a call that changed something gets its result; a
// call that changed nothing gets an entry of its own when record is set
// (it was refused), and none otherwise.
func (s *State) FinishAudit(ctx context.Context, a *Audit, code uint32, message string, record bool) error {
	seq := a.Seq()
	ctx = withoutAudit(ctx)
	message = cutText(message, maxAuditTextLength)
	if seq != 0 {
		return s.apply(ctx, "record the result of audit entry "+strconv.FormatInt(seq, 10), func(ctx context.Context) (*change, error) {
			r, err := s.read(ctx, get(AuditKey(seq)))
			if err != nil {
				return nil, err
			}
			e, err := decode[pb.AuditEntry](r.one(0))
			if err != nil {
				return nil, err
			}
			if e == nil || !e.v.Pending {
				return nil, errNothingToDo // pruned already, or recorded
			}
			e.v.Pending, e.v.Code, e.v.Message = false, code, message
			a.mu.Lock()
			e.v.Targets = append(e.v.Targets, a.late...)
			a.mu.Unlock()
			boundEntry(e.v)
			c := &change{}
			c.ifMod(e.key, e.mod)
			c.put(e.key, e.v)
			return c, nil
		})
	}
	if !record {
		return nil
	}
	a.mu.Lock()
	entry := protoClone(a.entry)
	a.mu.Unlock()
	return s.apply(ctx, "record a refused "+entry.Rpc, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(seqAudit))
		if err != nil {
			return nil, err
		}
		last, rev, err := seqValue(r.one(0))
		if err != nil {
			return nil, err
		}
		e := protoClone(entry)
		e.Seq, e.UnixNano, e.Code, e.Message = last+1, s.now().UnixNano(), code, message
		c := &change{}
		c.ifMod(seqAudit, rev)
		c.putRaw(seqAudit, strconv.FormatInt(e.Seq, 10))
		c.put(AuditKey(e.Seq), e)
		return c, nil
	})
}

// AuditQuery selects entries of the audit log.
type AuditQuery struct {
	// User keeps the entries of that user, when set.
	User string
	// Since keeps the entries made since, when set.
	Since time.Time
	// Entity keeps the entries that name it, when set: a target's id
	// ("kv", "kv/0", "3"), a kind:id ("machine:3"), or a service, whose
	// units' entries it keeps too ("kv" keeps "unit:kv/0").
	Entity string
	// RPC keeps the entries of that method ("Deploy"), in any case, when
	// set.
	RPC string
}

// Matches says whether e is one of the query's.
func (q AuditQuery) Matches(e *pb.AuditEntry) bool {
	if q.User != "" && e.User != q.User {
		return false
	}
	if q.RPC != "" && !strings.EqualFold(e.Rpc, q.RPC) {
		return false
	}
	if !q.Since.IsZero() && e.UnixNano < q.Since.UnixNano() {
		return false
	}
	if q.Entity == "" {
		return true
	}
	for _, t := range e.Targets {
		_, id, _ := strings.Cut(t, ":")
		if t == q.Entity || id == q.Entity || strings.HasPrefix(id, q.Entity+"/") {
			return true
		}
	}
	return false
}

// auditPage is how many entries one read of the audit log returns.
const auditPage = 500

// ScanAudit returns, oldest first, the newest limit entries q matches, of
// those it looked at: it reads from the newest back, a page at a time,
// and stops at the first entry older than q.Since, after limit matches,
// or once it has looked at budget entries. truncated says it stopped
// before the oldest entry for one of the last two reasons. rev is the
// revision the first page was read at: following the log from it misses
// nothing the scan did not see.
func (s *State) ScanAudit(ctx context.Context, q AuditQuery, limit, budget int) (out []*pb.AuditEntry, truncated bool, rev int64, err error) {
	start := rangeStart(auditPrefix, true)
	end := prefixEnd(auditPrefix)
	looked := 0
	for {
		g := getOp{Key: start, End: end, Limit: auditPage, NewestFirst: true, Rev: rev}
		resp, err := s.readRange(ctx, g)
		if err != nil {
			return nil, false, 0, err
		}
		if rev == 0 {
			rev = resp.Rev
		}
		for _, kv := range resp.Kvs {
			e, err := decode[pb.AuditEntry](kv)
			if err != nil {
				return nil, false, 0, err
			}
			if !q.Since.IsZero() && e.v.UnixNano < q.Since.UnixNano() {
				reverse(out)
				return out, false, rev, nil
			}
			looked++
			if q.Matches(e.v) {
				out = append(out, e.v)
			}
			if len(out) >= limit || looked >= budget {
				reverse(out)
				return out, true, rev, nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			reverse(out)
			return out, false, rev, nil
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
}

func reverse[T any](xs []T) {
	for i, j := 0, len(xs)-1; i < j; i, j = i+1, j-1 {
		xs[i], xs[j] = xs[j], xs[i]
	}
}

// AuditSeq returns the seq of the newest entry, 0 before the first.
func (s *State) AuditSeq(ctx context.Context) (int64, error) {
	r, err := s.read(ctx, get(seqAudit))
	if err != nil {
		return 0, err
	}
	last, _, err := seqValue(r.one(0))
	return last, err
}

// AuditAfter returns up to limit entries after seq, oldest first, and
// the revision it read them at.
func (s *State) AuditAfter(ctx context.Context, seq int64, limit int) ([]*pb.AuditEntry, int64, error) {
	resp, err := s.readRange(ctx, getOp{Key: AuditKey(seq + 1), End: prefixEnd(auditPrefix), Limit: int64(limit)})
	if err != nil {
		return nil, 0, err
	}
	out := make([]*pb.AuditEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := decode[pb.AuditEntry](kv)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, e.v)
	}
	return out, resp.Rev, nil
}

// DecodeAuditEntry decodes an entry as a watch of AuditPrefix delivers it.
func DecodeAuditEntry(value []byte) (*pb.AuditEntry, error) {
	e := &pb.AuditEntry{}
	if err := proto.Unmarshal(value, e); err != nil {
		return nil, fmt.Errorf("decode audit entry: %w", err)
	}
	return e, nil
}

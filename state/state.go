package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/state/internal/etcdkv"
)

// MaxTxnOps is the most operations (comparisons plus writes) any transaction
// of this package holds, whatever the size of the model. etcd refuses more
// than 128 by default.
const MaxTxnOps = 64

// Config configures a State.
type Config struct {
	// Namespace prefixes every key, such as "/lifeline/"; empty for none.
	Namespace string
	// RevisionHistory is how many revisions of each service's spec a
	// change keeps that does not say (SpecChange.History): reverts and
	// aborts among them; DefaultRevisionHistory when zero.
	RevisionHistory int
	// MaxAttempts bounds how often an operation re-reads and retries after
	// its transaction's comparisons fail; 64 when zero.
	MaxAttempts int
	// MaxWritesInFlight bounds the write requests the State has in etcd
	// at once; DefaultMaxWritesInFlight when zero (backpressure.go).
	MaxWritesInFlight int
	// Clock tells the time for status records and forced-removal deadlines;
	// time.Now when nil.
	Clock func() time.Time
	// Logger is for the cleaner; silent when nil.
	Logger hclog.Logger
	// CharmStoreLimit bounds the bytes of the charm archives stored;
	// DefaultCharmStoreLimit when zero, none when negative.
	CharmStoreLimit int64
	// AtLeast, when not nil, returns a revision every read must be at or
	// past: one read at an earlier revision is read again (etcdkv). A
	// controller passes its watch hub's: an agent acting on a change the
	// hub handed it must find the change when it calls.
	AtLeast func() int64
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	if c.MaxAttempts < 0 {
		return fmt.Errorf("state: MaxAttempts %d is negative", c.MaxAttempts)
	}
	if c.MaxWritesInFlight < 0 {
		return fmt.Errorf("state: MaxWritesInFlight %d is negative", c.MaxWritesInFlight)
	}
	return nil
}

// State reads and changes the model stored in etcd.
type State struct {
	// kv is for the few calls that are not an operation's reads or
	// transaction: leases, credentials, charms' chunks, the CA.
	kv clientv3.KV
	// gate bounds the writes in etcd, kv's and the operations'.
	gate *etcdkv.Gate
	// etcd sends the operations' reads and transactions (reads.go,
	// writes.go).
	etcd    *etcdkv.KV
	watcher clientv3.Watcher
	lease   clientv3.Lease
	cfg     Config
	stats   stats
	// presenceDeleteTimeout, when set (by a test), bounds each try of
	// deleting a presence key in its place (presence.go).
	presenceDeleteTimeout time.Duration
	// hot queues this process's writers of the id sequences and of the
	// audit log's seq.
	hot keyLocks
	// resv coalesces the reservations of numbers from the id sequences.
	resv reservations
	// presences are the leases the agents' presence keys are bound to.
	presences presenceLeases
	// deleting are the keys the State's transactions in flight delete,
	// which a witness had better not be (deleting.go).
	deleting deletions
	// ops keeps the operations' records last read (opcache.go).
	ops opCache
	// claims keeps the static host claims of the charms read (claims.go).
	claims claimsCache
	// making counts, by operation, the State's runs of materializeTasks
	// under way: MaterializePending leaves those operations to them.
	making making
}

// New returns a State over the client's cluster, confined to cfg.Namespace.
// The caller keeps ownership of the client.
func New(c *clientv3.Client, cfg Config) (*State, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 64
	}
	if cfg.MaxWritesInFlight == 0 {
		cfg.MaxWritesInFlight = DefaultMaxWritesInFlight
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.CharmStoreLimit == 0 {
		cfg.CharmStoreLimit = DefaultCharmStoreLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &State{kv: c.KV, watcher: c.Watcher, lease: c.Lease, cfg: cfg}
	if cfg.Namespace != "" {
		s.kv = namespace.NewKV(c.KV, cfg.Namespace)
		s.watcher = namespace.NewWatcher(c.Watcher, cfg.Namespace)
		s.lease = namespace.NewLease(c.Lease, cfg.Namespace)
	}
	s.gate = etcdkv.NewGate(cfg.MaxWritesInFlight)
	s.kv = etcdkv.NewGatedKV(s.kv, s.gate, metered)
	s.etcd = etcdkv.New(c, s.gate, etcdkv.Config{Namespace: cfg.Namespace, AtLeast: cfg.AtLeast})
	return s, nil
}

func (s *State) now() time.Time { return s.cfg.Clock() }

// Stats counts the transactions the State committed.
type Stats struct {
	// Txns is the number of write transactions committed.
	Txns int64
	// Conflicts is the number of write transactions whose comparisons
	// failed, each followed by a fresh read and a retry.
	Conflicts int64
	// Aborted is the number of operations that ran out of retries.
	Aborted int64
	// Reads is the number of read round trips, and ReadsAgain how many of
	// them were made again for being at a revision before Config.AtLeast.
	Reads, ReadsAgain int64
	// MaxOps is the largest number of operations in one write transaction.
	MaxOps int64
	// Busy is the number of writes etcd refused while it caught up
	// applying what it had committed, each sent again after a pause.
	Busy int64
	// Holding is the number of operations holding a write slot now (the
	// State's, and those gone ahead), and Waiting the number waiting
	// for one.
	Holding, Waiting int64
}

type stats struct {
	txns, conflicts, aborted, maxOps atomic.Int64
	// byOp maps a method's name to its *atomic.Int64 of conflicts.
	byOp sync.Map
}

// conflict counts a failed transaction of the operation that called apply.
// It runs only on a conflict, so finding the caller's name costs nothing
// on the common path.
func (st *stats) conflict() {
	st.conflicts.Add(1)
	op := "unknown"
	if pc, _, _, ok := runtime.Caller(2); ok {
		if f := runtime.FuncForPC(pc); f != nil {
			op = methodName(f.Name())
		}
	}
	n, ok := st.byOp.Load(op)
	if !ok {
		n, _ = st.byOp.LoadOrStore(op, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

// methodName turns a function's full name
// ("github.com/x/state.(*State).AddUnits.func1") into its method's
// ("AddUnits").
func methodName(full string) string {
	name := full[strings.LastIndexByte(full, '/')+1:]
	if i := strings.Index(name, ")."); i >= 0 {
		name = name[i+2:]
	} else if i := strings.IndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	name, _, _ = strings.Cut(name, ".")
	return name
}

// Stats returns the counts so far.
func (s *State) Stats() Stats {
	reads, again := s.etcd.Reads()
	return Stats{
		Txns:       s.stats.txns.Load(),
		Conflicts:  s.stats.conflicts.Load(),
		Aborted:    s.stats.aborted.Load(),
		Reads:      reads,
		ReadsAgain: again,
		MaxOps:     s.stats.maxOps.Load(),
		Busy:       s.gate.Refused(),
		Holding:    s.gate.Holding(),
		Waiting:    s.gate.Waiting(),
	}
}

// ConflictsByOp splits Stats' Conflicts by the State method whose
// transaction failed ("AddUnits", "setUnitStatus").
func (s *State) ConflictsByOp() map[string]int64 {
	m := map[string]int64{}
	s.stats.byOp.Range(func(k, v any) bool {
		m[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return m
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("state: marshal %T: %v", m, err))
	}
	return b
}

// errNothingToDo ends an operation that finds its work already done.
var errNothingToDo = errors.New("nothing to do")

// apply runs attempt, which reads what it needs and returns the change it
// decided on, and commits that change. When the change's comparisons fail,
// something it relied on moved: apply calls attempt again, a bounded number
// of times. attempt may return errNothingToDo to end with success.
func (s *State) apply(ctx context.Context, what string, attempt func(ctx context.Context) (*change, error)) error {
	// The operation takes its slot among the writes in etcd before it
	// reads, and keeps it for all its attempts: what it reads is not
	// left to age while it queues for the slot, and a retry does not
	// queue again (backpressure.go).
	ctx, release, err := s.hold(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer release()
	// An operator's call writes its audit entry with its first change
	// (audit.go): its operations commit one at a time, and the first to
	// change something adds the entry to its transaction.
	a := auditOf(ctx)
	if a != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
	}
	for i := 0; i < s.cfg.MaxAttempts; i++ {
		c, err := attempt(ctx)
		if errors.Is(err, errNothingToDo) {
			return nil
		}
		if err != nil {
			return err
		}
		var ok bool
		var rev int64
		if a != nil && a.seq == 0 && !c.empty() {
			ok, rev, err = s.commitAudited(ctx, c, a)
		} else {
			ok, rev, err = s.commitRev(ctx, c)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			if a != nil && !c.empty() {
				if c.auditSeq != 0 {
					a.seq = c.auditSeq
				}
				a.commits = append(a.commits, rev)
			}
			return nil
		}
		s.stats.conflict()
		if i >= 2 {
			// Many writers want the same keys: spread them out, more the
			// longer they keep colliding, so that every one gets its turn.
			d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(i-2, 7)))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
	}
	s.stats.aborted.Add(1)
	return fmt.Errorf("%s: %w", what, ErrAborted)
}

// record is a decoded value with the revisions of the key that held it.
type record[T proto.Message] struct {
	key    string
	v      T
	mod    int64
	create int64
}

// decode decodes kv into a new T; a nil kv gives a nil record.
func decode[T any, P interface {
	*T
	proto.Message
}](kv *mvccpb.KeyValue) (*record[P], error) {
	if kv == nil {
		return nil, nil
	}
	var m P = new(T)
	if err := proto.Unmarshal(kv.Value, m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	return &record[P]{key: string(kv.Key), v: m, mod: kv.ModRevision, create: kv.CreateRevision}, nil
}

// listAll returns every key with the prefix, paging so that no single
// response grows with the model. All pages are read at one revision.
func (s *State) listAll(ctx context.Context, prefix string, keysOnly bool) ([]*mvccpb.KeyValue, error) {
	return s.listRev(ctx, prefix, keysOnly, 0)
}

// listRev is listAll at revision rev (the current one when zero).
func (s *State) listRev(ctx context.Context, prefix string, keysOnly bool, rev int64) ([]*mvccpb.KeyValue, error) {
	kvs, _, err := s.listRevAt(ctx, prefix, keysOnly, rev)
	return kvs, err
}

// listRevAt is listRev that also returns the revision read: the first
// page's, when rev is zero, which every later page reads too.
func (s *State) listRevAt(ctx context.Context, prefix string, keysOnly bool, rev int64) ([]*mvccpb.KeyValue, int64, error) {
	return s.listRange(ctx, rangeStart(prefix, true), prefixEnd(prefix), keysOnly, rev)
}

// listPage is how many keys ListMany's first read of a prefix returns at
// most, in a transaction shared with other listings.
const listPage = 1000

// rangeStart is the first key of a read of key, or of the keys under it
// with prefix: the key itself, but for the empty prefix.
func rangeStart(key string, prefix bool) string { return etcdkv.RangeStart(key, prefix) }

// listRange is listRevAt of the keys from start to end, in one read. etcd
// answers a read with a limit by visiting every key of its range in its
// index, to count them, whatever the limit: reading a range in pages of P
// keys visits N²/(2P) keys, which made the status of a 100,000-unit model
// (300,000 keys of statuses, scopes and units in pages of 1,000) take a
// minute of etcd's CPU. One read visits each key once; the caller holds
// the whole listing either way.
func (s *State) listRange(ctx context.Context, start, end string, keysOnly bool, rev int64) ([]*mvccpb.KeyValue, int64, error) {
	resp, err := s.readRange(ctx, getOp{Key: start, End: end, KeysOnly: keysOnly, Rev: rev})
	if err != nil {
		return nil, 0, err
	}
	if rev == 0 {
		rev = resp.Rev
	}
	return resp.Kvs, rev, nil
}

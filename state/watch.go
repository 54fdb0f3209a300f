package state

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/lifelinehq/lifeline/internal/pause"
)

// EventType says whether an event wrote or deleted its key.
type EventType int

// The event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

// Event is one change of one key.
type Event struct {
	Type  EventType
	Key   string
	Value []byte
	// CreateRevision tells incarnations of a key apart; zero on deletes.
	CreateRevision int64
	ModRevision    int64
}

// WatchBatch is what a watch delivers: the events of one or more whole
// revisions, in order.
type WatchBatch struct {
	// Revision is the revision the watcher has seen everything up to:
	// resuming from Revision+1 neither misses nor repeats an event.
	Revision int64
	// Reset says Events list every key under the prefix at Revision, as
	// puts: forget what you knew. It comes first when a watch starts from
	// nothing and whenever etcd compacted the revision it had to resume from.
	Reset bool
	// Events are the changes; empty for a progress report that only
	// advances Revision.
	Events []Event
}

// Watch streams the changes under prefix (a single key is a prefix of
// itself) after revision after, or, when after is zero, a Reset listing
// then the changes. It survives leader changes and lost connections by
// resuming from the last revision it delivered, and compaction by
// re-listing. The channel closes when ctx ends. It is for a watcher that
// keeps a copy of what it watches (the listing rebuilds the copy);
// WatchKey watches one key, WatchChanges keeps no copy.
func (s *State) Watch(ctx context.Context, prefix string, after int64) <-chan WatchBatch {
	out := make(chan WatchBatch)
	go s.watch(ctx, prefix, true, after, out)
	return out
}

// WatchKey is Watch of exactly one key: "units/kv/1" and not also
// "units/kv/10".
func (s *State) WatchKey(ctx context.Context, key string, after int64) <-chan WatchBatch {
	out := make(chan WatchBatch)
	go s.watch(ctx, key, false, after, out)
	return out
}

// WatchChanges is Watch that never lists: it streams the changes under
// prefix after revision after (which must be a revision received earlier,
// not zero). When etcd compacted the revision to resume from, the changes
// in between are lost: it then delivers a Reset batch without events at
// the current revision, and the changes after it. It is for a watcher of
// many keys that keeps no copy of them (the controller's watch hub), to
// which a listing of everything would be of no use.
func (s *State) WatchChanges(ctx context.Context, prefix string, after int64) <-chan WatchBatch {
	out := make(chan WatchBatch)
	go s.watchFrom(ctx, prefix, true, after, false, out)
	return out
}

// RequestProgress asks etcd to tell the watches of WatchChanges the
// store's current revision once they have sent every change up to it:
// each then delivers a progress batch (no events) at that revision. A
// watcher waiting for a revision that brought no change under its prefix
// (a write outside the State's namespace, in an etcd shared with others)
// gets there so. It reaches the watches' own stream, which is keyed by
// its metadata (watchFrom): the caller's outgoing metadata is not sent.
func (s *State) RequestProgress(ctx context.Context) error {
	ctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(metadata.NewOutgoingContext(ctx, metadata.MD{})), "lifeline-watch", "changes")
	if err := s.watcher.RequestProgress(ctx); err != nil {
		return fmt.Errorf("request the watches' progress: %w", err)
	}
	return nil
}

// List returns every key under prefix at one revision, which it returns
// too, as put events: what a Reset batch of Watch holds.
func (s *State) List(ctx context.Context, prefix string) ([]Event, int64, error) {
	return s.listEvents(ctx, prefix, true)
}

// ListKey is List of exactly one key: none or one event.
func (s *State) ListKey(ctx context.Context, key string) ([]Event, int64, error) {
	return s.listEvents(ctx, key, false)
}

func (s *State) listEvents(ctx context.Context, key string, isPrefix bool) ([]Event, int64, error) {
	evs, at, err := s.ListMany(ctx, []ListSpec{{Key: key, Prefix: isPrefix}})
	if err != nil {
		return nil, 0, err
	}
	return evs[0], at, nil
}

func putEvents(kvs []*mvccpb.KeyValue) []Event {
	evs := make([]Event, len(kvs))
	for i, kv := range kvs {
		evs[i] = Event{Type: EventPut, Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}
	}
	return evs
}

// ListSpec names one listing of ListMany: exactly one key, or every key
// under a prefix.
type ListSpec struct {
	Key    string
	Prefix bool
}

// listManyOps bounds the listings ListMany reads in one transaction.
const listManyOps = MaxTxnOps

// ListMany is List or ListKey of each spec, all at one revision, which it
// returns too: in one read for up to 64 specs, where one read each would
// cost a transaction each. A prefix holding more than a page of keys
// takes further reads, at the same revision.
func (s *State) ListMany(ctx context.Context, specs []ListSpec) ([][]Event, int64, error) {
	out := make([][]Event, len(specs))
	var rev int64
	for lo := 0; lo < len(specs); lo += listManyOps {
		chunk := specs[lo:min(lo+listManyOps, len(specs))]
		gets := make([]getOp, len(chunk))
		for i, sp := range chunk {
			gets[i] = get(sp.Key)
			if sp.Prefix {
				gets[i] = getPrefix(sp.Key, listPage)
			}
			gets[i].Rev = rev
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = r.rev
		}
		for i, sp := range chunk {
			kvs := r.all(i)
			if sp.Prefix && r.more(i) && len(kvs) > 0 {
				rest, _, err := s.listRange(ctx, string(kvs[len(kvs)-1].Key)+"\x00", prefixEnd(sp.Key), false, rev)
				if err != nil {
					return nil, 0, err
				}
				kvs = append(kvs, rest...)
			}
			out[lo+i] = putEvents(kvs)
		}
	}
	return out, rev, nil
}

func (s *State) watch(ctx context.Context, prefix string, isPrefix bool, rev int64, out chan<- WatchBatch) {
	s.watchFrom(ctx, prefix, isPrefix, rev, true, out)
}

// watchFrom streams the changes under prefix after rev. When it must start
// afresh (rev is zero, or etcd compacted it), it sends a listing if list,
// else an empty Reset batch at the current revision.
func (s *State) watchFrom(ctx context.Context, prefix string, isPrefix bool, rev int64, list bool, out chan<- WatchBatch) {
	defer close(out)
	send := func(b WatchBatch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	relist := rev == 0
	for ctx.Err() == nil {
		if relist {
			var evs []Event
			var at int64
			var err error
			if list {
				evs, at, err = s.listEvents(ctx, prefix, isPrefix)
			} else {
				at, err = s.Revision(ctx)
			}
			if err != nil {
				if !pause.For(ctx, bo.NextBackOff()) {
					return
				}
				continue
			}
			if !send(WatchBatch{Revision: at, Reset: true, Events: evs}) {
				return
			}
			rev, relist = at, false
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		if !list {
			// The client sends watches with the same metadata on one
			// stream, whose events etcd sends in one queue: a watch of
			// everything (the watch hub's), slow to take in at times,
			// held up every other watch on it (the provisioner's, the
			// cleaner's) by seconds. It gets a stream of its own.
			wctx = metadata.AppendToOutgoingContext(wctx, "lifeline-watch", "changes")
		}
		opts := []clientv3.OpOption{clientv3.WithRev(rev + 1), clientv3.WithProgressNotify()}
		if isPrefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		wch := s.watcher.Watch(wctx, prefix, opts...)
		for resp := range wch {
			if resp.CompactRevision != 0 {
				relist = true
				break
			}
			if resp.Err() != nil {
				break
			}
			if resp.IsProgressNotify() {
				if resp.Header.Revision > rev {
					rev = resp.Header.Revision
					if !send(WatchBatch{Revision: rev}) {
						cancel()
						return
					}
				}
				continue
			}
			if len(resp.Events) == 0 {
				continue
			}
			bo.Reset()
			evs := make([]Event, len(resp.Events))
			for i, e := range resp.Events {
				evs[i] = Event{Key: string(e.Kv.Key), Value: e.Kv.Value, CreateRevision: e.Kv.CreateRevision, ModRevision: e.Kv.ModRevision, Type: EventPut}
				if e.Type == clientv3.EventTypeDelete {
					evs[i].Type = EventDelete
				}
			}
			rev = evs[len(evs)-1].ModRevision
			if !send(WatchBatch{Revision: rev, Events: evs}) {
				cancel()
				return
			}
		}
		cancel()
		if !relist && !pause.For(ctx, bo.NextBackOff()) {
			return
		}
	}
}

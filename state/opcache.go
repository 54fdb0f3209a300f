package state

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// An operation's record holds its targets: 10,000 of them make it some
// 150 KB, and every change to one of its tasks reads it (its state, its
// max_parallel, whether its tasks are all made). The State keeps the
// records it last read, by mod revision: a task's change reads the
// record's key alone and uses the one kept when it is unchanged. The
// record read is still compared by mod revision when the change relies
// on it, so a stale copy can only cost a retry, never a wrong decision.

// opCacheSize bounds the records kept.
const opCacheSize = 64

type opCache struct {
	mu   sync.Mutex
	recs map[int64]*record[*pb.Operation]
}

// getOperation is the read of operation id's record: its key alone when
// a copy is kept.
func (s *State) getOperation(id int64) getOp {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	if s.ops.recs[id] != nil {
		return getKeyOnly(OperationKey(id))
	}
	return get(OperationKey(id))
}

// operationRead returns operation id's record from kv, the answer to
// getOperation(id): the copy kept when kv is its key alone at the same
// mod revision, else read again.
func (s *State) operationRead(ctx context.Context, kv *mvccpb.KeyValue, id int64) (*record[*pb.Operation], error) {
	if kv != nil && len(kv.Value) == 0 {
		s.ops.mu.Lock()
		rec := s.ops.recs[id]
		s.ops.mu.Unlock()
		if rec != nil && rec.mod == kv.ModRevision {
			return rec, nil
		}
		r, err := s.read(ctx, get(OperationKey(id)))
		if err != nil {
			return nil, err
		}
		kv = r.one(0)
	}
	rec, err := operationFrom(kv, id)
	if err != nil {
		return nil, err
	}
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	if s.ops.recs == nil || len(s.ops.recs) >= opCacheSize {
		s.ops.recs = map[int64]*record[*pb.Operation]{}
	}
	s.ops.recs[id] = rec
	return rec, nil
}

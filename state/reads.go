package state

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/lifelinehq/lifeline/state/internal/etcdkv"
)

// A State's reads are gets of package etcdkv, which builds their requests
// and sends them in the State's namespace (docs/DESIGN.md, "The etcd
// seam"); the rules read their answers here.

// getOp is one read: a key, or the keys of a range.
type getOp = etcdkv.Get

// get reads key.
func get(key string) getOp { return etcdkv.Key(key) }

// getKeyOnly reads key without its value: whether it exists, and its
// revisions.
func getKeyOnly(key string) getOp { return etcdkv.KeyOnly(key) }

// getExists reads whether key exists, from etcd's index alone (exists).
func getExists(key string) getOp { return etcdkv.Exists(key) }

// getCount reads how many keys have the prefix, from etcd's index alone.
func getCount(prefix string) getOp { return etcdkv.Count(prefix) }

// getPrefix gets up to limit keys with the prefix (all when limit is 0).
func getPrefix(prefix string, limit int64) getOp { return etcdkv.Prefix(prefix, limit) }

// getKeys gets up to limit keys with the prefix, without their values.
func getKeys(prefix string, limit int64) getOp { return etcdkv.Keys(prefix, limit) }

// getLastKey gets the last key with the prefix, without its value.
func getLastKey(prefix string) getOp { return etcdkv.LastKey(prefix) }

// reads is the answer to one read round trip: one range per get.
type reads struct {
	rev    int64
	ranges []etcdkv.Range
}

// read performs the gets in one linearizable round trip at one revision.
func (s *State) read(ctx context.Context, gets ...getOp) (*reads, error) {
	rev, ranges, err := s.etcd.Read(ctx, gets...)
	if err != nil {
		return nil, err
	}
	return &reads{rev: rev, ranges: ranges}, nil
}

// readRange reads one range on its own.
func (s *State) readRange(ctx context.Context, g getOp) (*etcdkv.Range, error) {
	return s.etcd.ReadRange(ctx, g)
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

package state

import (
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A removal or a departure from something dying asserts that a witness,
// another key under the same prefix, still exists when it commits
// (change.ifExists): the witness is chosen from keys read a moment
// before. In a destroy, hundreds of the State's own transactions are in
// etcd at once, waiting their turn to be applied, many of them deleting
// exactly such keys; a witness one of them deletes is gone by the time
// the change is applied, its comparison fails, and the whole operation
// is read and tried again. So the State remembers which keys its
// transactions in flight delete (commit), and a witness is chosen among
// keys no such transaction deletes, when there is one (staying). This
// changes nothing the rules rest on: the comparison still decides.

// deletions counts, by key, the State's transactions in flight that
// delete the key. Only single keys are counted, not ranges.
type deletions struct {
	mu   sync.Mutex
	keys map[string]int
}

// add counts c's deletions of single keys as in flight, and returns them
// for done.
func (d *deletions) add(c *change) []string {
	var keys []string
	for _, w := range c.ops {
		if w.Del && w.End == "" {
			keys = append(keys, w.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	d.mu.Lock()
	if d.keys == nil {
		d.keys = map[string]int{}
	}
	for _, k := range keys {
		d.keys[k]++
	}
	d.mu.Unlock()
	return keys
}

// done counts keys, returned by add, as no longer in flight.
func (d *deletions) done(keys []string) {
	if len(keys) == 0 {
		return
	}
	d.mu.Lock()
	for _, k := range keys {
		if n := d.keys[k]; n > 1 {
			d.keys[k] = n - 1
		} else {
			delete(d.keys, k)
		}
	}
	d.mu.Unlock()
}

// staying returns those of kvs that no transaction in flight deletes, or
// kvs itself when each one is being deleted (or there are none): the
// candidate witnesses likeliest to be there when a change commits.
func (d *deletions) staying(kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	if len(kvs) == 0 {
		return kvs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.keys) == 0 {
		return kvs
	}
	gone := 0
	for _, kv := range kvs {
		if d.keys[string(kv.Key)] > 0 {
			gone++
		}
	}
	if gone == 0 || gone == len(kvs) {
		return kvs
	}
	out := make([]*mvccpb.KeyValue, 0, len(kvs)-gone)
	for _, kv := range kvs {
		if d.keys[string(kv.Key)] == 0 {
			out = append(out, kv)
		}
	}
	return out
}

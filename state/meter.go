package state

import (
	"context"
	"sync/atomic"
)

// A caller that budgets what someone writes (the controller, by agent
// credential) passes a context made with Metered: every write the State
// commits under it adds its bytes to the meter. The bytes are those etcd
// keeps a version of, the keys and values put, which is what fills its
// database until a compaction: a small update of a large record writes
// the whole record again.

type meterKey struct{}

// Metered returns a context under which every write the State commits
// adds the bytes it puts (keys and values) to n.
func Metered(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, meterKey{}, n)
}

// metered adds n bytes to ctx's meter, if it has one.
func metered(ctx context.Context, n int) {
	if m, ok := ctx.Value(meterKey{}).(*atomic.Int64); ok {
		m.Add(int64(n))
	}
}

package etcdkv

import (
	"math"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Config configures a KV.
type Config struct {
	// Namespace prefixes every key, such as "/lifeline/"; empty for none.
	Namespace string
	// AtLeast, when not nil, returns a revision every read must be at or
	// past: one read at an earlier revision is read again (atLeast).
	AtLeast func() int64
}

// KV sends a State's reads and transactions to etcd, in its namespace.
type KV struct {
	// Remote is where the requests go (RemoteOf). Tests of package state
	// wrap it to watch or break the requests on their way.
	Remote etcdserverpb.KVClient
	gate   *Gate
	cfg    Config
	// reads counts the read round trips, readsAgain those made again for
	// being older than Config.AtLeast.
	reads, readsAgain atomic.Int64
}

// New returns a KV over c's cluster whose transactions that write take a
// slot of gate.
func New(c *clientv3.Client, gate *Gate, cfg Config) *KV {
	return &KV{Remote: RemoteOf(c), gate: gate, cfg: cfg}
}

// Reads returns how many read round trips the KV made, and how many of
// them it made again for being older than Config.AtLeast.
func (k *KV) Reads() (reads, again int64) { return k.reads.Load(), k.readsAgain.Load() }

// remoteKV is what a client's KV may offer to be read without clientv3's
// layers: the member's own handler, in the controller's process
// (package embedetcd).
type remoteKV interface {
	Remote() etcdserverpb.KVClient
}

// RemoteOf returns the requests' way to c's cluster: the member's handler
// when c's KV offers it, else clientv3's retrying client over c's
// connection.
func RemoteOf(c *clientv3.Client) etcdserverpb.KVClient {
	if r, ok := c.KV.(remoteKV); ok {
		return r.Remote()
	}
	return clientv3.RetryKVClient(c)
}

// callOpts are those clientv3 gives each call of its own: wait for the
// connection rather than fail at once, and take an answer of any size.
var callOpts = []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32)}

package embedetcd

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/etcdserver/txn"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// inProcessClient is a client of the member whose reads and transactions
// call the member directly, as etcd's v3client does: no socket, no HTTP/2
// framing and no protobuf encoding between the controller and its own
// member. That is where a controller's calls to etcd go (a third of its
// CPU at 10,000 units went to the transport).
//
// Writes (transactions that put or delete) go to the member's request
// handler, through raft. Reads (ranges, and transactions that only read)
// are served from the member's store at once (directReads).
//
// Its watches and leases go through the socket. etcd's in-process adapter
// for streams joins client and server with unbuffered channels: when the
// client sends a watch request while the server is sending it events, both
// can wait for each other for good. At 10,000 units the watch hub's watch
// stopped that way and no machine agent heard that its machine was dying
// (TestInProcessClientWatchesChurn). In process, too, every watcher of a
// key would be handed the same event in memory, which the namespace
// wrapper package state uses rewrites in place; over the socket each
// watcher decodes its own.
func inProcessClient(s *Server) (*clientv3.Client, error) {
	c, err := NewClient(clientv3.Config{Endpoints: []string{s.endpoint}})
	if err != nil {
		return nil, err
	}
	kvc := callerEnded{adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(s.etcd.Server))}
	d := &directReads{KVClient: kvc, s: s}
	c.KV = inProcessKV{KV: clientv3.NewKVFromKVClient(d, c), remote: d}
	return c, nil
}

// inProcessKV is the in-process client's KV. Remote gives its requests'
// way to the member, for package state to send requests it built itself,
// skipping clientv3's operations and their namespace wrapper.
type inProcessKV struct {
	clientv3.KV
	remote pb.KVClient
}

// Remote returns the member's handler for requests, reads served at once.
func (k inProcessKV) Remote() pb.KVClient { return k.remote }

// callerEnded answers a request whose caller's context ended while the
// member handled it as a client over a socket would: with the context's
// code (codes.Canceled, codes.DeadlineExceeded), which clientv3 turns into
// the context's error. Called directly, the member's handler gave a write
// cancelled while it waited for raft its own "etcdserver: request
// cancelled", which its gRPC layer does not map (codes.Unknown), and the
// controller answered an agent that gave up on a status report Unknown
// (8 times in a destroy of 10,000 units). It wraps what directReads
// passes on to the handler (writes, compaction): reads, directReads
// answers itself.
type callerEnded struct{ pb.KVClient }

func (c callerEnded) Put(ctx context.Context, r *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	return untilEnded(ctx, c.KVClient.Put, r, opts)
}

func (c callerEnded) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return untilEnded(ctx, c.KVClient.DeleteRange, r, opts)
}

func (c callerEnded) Txn(ctx context.Context, r *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	return untilEnded(ctx, c.KVClient.Txn, r, opts)
}

func (c callerEnded) Compact(ctx context.Context, r *pb.CompactionRequest, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return untilEnded(ctx, c.KVClient.Compact, r, opts)
}

// untilEnded calls call, its error replaced as ended says.
func untilEnded[Req, Resp any](ctx context.Context, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), r Req, opts []grpc.CallOption) (Resp, error) {
	resp, err := call(ctx, r, opts...)
	return resp, ended(ctx, err)
}

// ended is err, or, when the caller's context has ended, the status a
// gRPC client gets then.
func ended(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

// directReads serves reads from the member's store, where the member's
// request handler would first make them linearizable by a round of raft
// (a read index) and trace every step of them.
//
// The member is the cluster's only one, so it is always the leader and
// its store holds every write whose call has returned: a write's call
// returns once the write is applied to the store. A read of the store
// then sees every write that completed before it began, and any that
// completed while it ran or none, which is what linearizable means. A
// write's change, though, reaches the member's watchers a moment before
// the write is visible to reads (etcd's watchable store notifies, then
// ends the write): a reader that acts on a change it was sent may read
// the store as it was just before. The watch hub reads its listings again
// until they are at or past every change it handed out
// (watchhub.listAtLeast).
//
// Plain reads, which are all package state makes (keys and ranges, with
// a limit, at a revision, keys only or counted; a transaction of them
// without conditions), are answered from one view of the store here
// (readAll, rangeIn); anything else by etcd's own code for a read. Either
// way etcd's trace of the read has its steps turned off: a step recorded
// for each stage of each range of a read of many keys was a quarter of
// what the controller allocated deploying 10,000 units, and only ever
// logged for a request slower than 300 ms.
type directReads struct {
	pb.KVClient // writes and anything else: the member's handler
	s           *Server
}

func (d *directReads) Range(ctx context.Context, r *pb.RangeRequest, _ ...grpc.CallOption) (*pb.RangeResponse, error) {
	var resp *pb.RangeResponse
	err := d.s.read(ctx, func(ctx context.Context, srv *etcdserver.EtcdServer) (err error) {
		if plainRange(r) {
			tr := srv.KV().Read(readMode(r), traceutil.Get(ctx))
			defer tr.End()
			resp, err = rangeIn(ctx, tr, r)
		} else {
			resp, _, err = txn.Range(ctx, srv.Logger(), srv.KV(), r)
		}
		if err == nil {
			d.s.fillHeader(resp.Header)
		}
		return err
	})
	return resp, err
}

func (d *directReads) Txn(ctx context.Context, r *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	if !txn.IsTxnReadonly(r) {
		return d.KVClient.Txn(ctx, r, opts...)
	}
	var resp *pb.TxnResponse
	err := d.s.read(ctx, func(ctx context.Context, srv *etcdserver.EtcdServer) (err error) {
		if plainReads(r) {
			resp, err = readAll(ctx, srv.KV(), r.Success)
		} else {
			// No lessor: a transaction that only reads puts nothing.
			resp, _, err = txn.Txn(ctx, srv.Logger(), r, false, srv.KV(), nil)
		}
		if err == nil {
			d.s.fillHeader(resp.Header)
		}
		return err
	})
	return resp, err
}

// plainRange reports whether r asks for nothing but keys in a range (with
// a limit, at a revision, keys only or a count): no sorting and no
// filtering by revision, which rangeIn leaves to etcd's own code.
func plainRange(r *pb.RangeRequest) bool {
	return r.SortOrder == pb.RangeRequest_NONE && r.SortTarget == pb.RangeRequest_KEY &&
		r.MinModRevision == 0 && r.MaxModRevision == 0 && r.MinCreateRevision == 0 && r.MaxCreateRevision == 0
}

// plainReads reports whether a transaction that only reads is plain
// ranges, unconditionally: what package state's reads are.
func plainReads(r *pb.TxnRequest) bool {
	if len(r.Compare) > 0 {
		return false
	}
	for _, op := range r.Success {
		if !plainRange(op.GetRequestRange()) {
			return false
		}
	}
	return true
}

// readAll answers plain ranges from one view of the store, all at its
// revision, as a successful transaction.
func readAll(ctx context.Context, kv mvcc.KV, ops []*pb.RequestOp) (*pb.TxnResponse, error) {
	mode := mvcc.SharedBufReadTxMode
	for _, op := range ops {
		if readMode(op.GetRequestRange()) != mode {
			mode = mvcc.ConcurrentReadTxMode
			break
		}
	}
	tr := kv.Read(mode, traceutil.Get(ctx))
	defer tr.End()
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{Revision: tr.Rev()}, Succeeded: true, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		rr, err := rangeIn(ctx, tr, op.GetRequestRange())
		if err != nil {
			return nil, err
		}
		resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}
	}
	return resp, nil
}

// smallRead is the most keys a range may ask for and still be read in
// place (readMode).
const smallRead = 64

// readMode is how a plain range reads the store. The writes applied since
// the store's last commit to its database are in a buffer, which the
// apply loop adds to with every write. A read that may take long (many
// keys, or a count) reads a copy of that buffer, made when it begins, so
// that it holds up no write: etcd's own mode for reads. A small read (one
// key or its count, or a range of at most smallRead keys) reads the
// buffer in place, holding up the apply loop's next write for the
// microseconds it takes: copying it was most of what such a read cost.
// While the controller destroyed 10,000 units the copies were a tenth of
// all it allocated.
func readMode(r *pb.RangeRequest) mvcc.ReadTxMode {
	if len(r.RangeEnd) > 0 && (r.CountOnly || r.Limit <= 0 || r.Limit > smallRead) {
		return mvcc.ConcurrentReadTxMode
	}
	return mvcc.SharedBufReadTxMode
}

// rangeIn answers a plain range from a view of the store, as etcd's own
// code does (txn.Range): one key more than the limit tells whether there
// are more; a range end of "\x00" means every key from the first.
func rangeIn(ctx context.Context, tr mvcc.TxnRead, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	limit := r.Limit
	if limit > 0 {
		limit++
	}
	end := r.RangeEnd
	if len(end) == 1 && end[0] == 0 {
		end = []byte{}
	}
	rr, err := tr.Range(ctx, r.Key, end, mvcc.RangeOptions{Limit: limit, Rev: r.Revision, Count: r.CountOnly})
	if err != nil {
		return nil, err
	}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: rr.Rev}, Count: int64(rr.Count)}
	if r.Limit > 0 && len(rr.KVs) > int(r.Limit) {
		rr.KVs = rr.KVs[:r.Limit]
		resp.More = true
	}
	resp.Kvs = make([]*mvccpb.KeyValue, len(rr.KVs))
	for i := range rr.KVs {
		if r.KeysOnly {
			rr.KVs[i].Value = nil
		}
		resp.Kvs[i] = &rr.KVs[i]
	}
	return resp, nil
}

// readers lets Close wait for the reads in flight before the member's
// store closes, and refuse those after, as the member's handler would.
type readers struct {
	mu     sync.RWMutex
	closed bool
}

// read runs f against the member unless it is closing, with a trace whose
// steps are off, and gives f's errors the codes the member's handler
// would.
func (s *Server) read(ctx context.Context, f func(context.Context, *etcdserver.EtcdServer) error) error {
	s.readers.mu.RLock()
	defer s.readers.mu.RUnlock()
	if s.readers.closed {
		return rpctypes.ErrGRPCStopped
	}
	srv := s.etcd.Server
	select {
	case <-srv.StoppingNotify():
		return rpctypes.ErrGRPCStopped
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	trace := traceutil.New("read", srv.Logger())
	var err error
	trace.StepWithFunction(func() {
		err = f(context.WithValue(ctx, traceutil.TraceKey{}, trace), srv)
	}, "read")
	switch {
	case errors.Is(err, mvcc.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, mvcc.ErrFutureRev):
		return rpctypes.ErrGRPCFutureRev
	}
	return err
}

// stopReads waits for the reads in flight and refuses any more.
func (s *Server) stopReads() {
	s.readers.mu.Lock()
	s.readers.closed = true
	s.readers.mu.Unlock()
}

// fillHeader fills in what the member's handler adds to a response's
// header; the revision is already there.
func (s *Server) fillHeader(h *pb.ResponseHeader) {
	srv := s.etcd.Server
	h.ClusterId = uint64(srv.Cluster().ID())
	h.MemberId = uint64(srv.MemberID())
	h.RaftTerm = srv.Term()
}

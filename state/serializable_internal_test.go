package state

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/etcdtest"
)

// staleRemote records how each read was asked for (serializable or not)
// and, from at on (0: never), answers serializable reads with the state at
// revision at, as a member behind the others would.
type staleRemote struct {
	etcdserverpb.KVClient
	mu    sync.Mutex
	at    int64
	reads []bool
}

func (r *staleRemote) Txn(ctx context.Context, req *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	first := req.Success[0].GetRequestRange()
	if first == nil {
		return r.KVClient.Txn(ctx, req, opts...) // a write
	}
	r.mu.Lock()
	r.reads = append(r.reads, first.Serializable)
	at := r.at
	r.mu.Unlock()
	if !first.Serializable || at == 0 {
		return r.KVClient.Txn(ctx, req, opts...)
	}
	for _, op := range req.Success {
		op.GetRequestRange().Revision = at
	}
	resp, err := r.KVClient.Txn(ctx, req, opts...)
	if err == nil {
		resp.Header.Revision = at
	}
	return resp, err
}

// took returns the reads since the last call, true for serializable.
func (r *staleRemote) took() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reads
	r.reads = nil
	return out
}

// An operation's first attempt reads serializably; what it then decides
// stands only if a comparison or a linearizable read bears it out.
func TestOperationsReadSerializableFirst(t *testing.T) {
	st, ms, ctx := gatedState(t, "", 8, 1)
	id := ms[0].Id
	rem := &staleRemote{KVClient: st.remote}
	st.remote = rem
	revision := func() int64 {
		t.Helper()
		resp, err := etcdtest.Client(t).Get(ctx, "any")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	instance := func() string {
		t.Helper()
		m, err := st.Machine(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		rem.took() // not the operations' reads
		return m.InstanceId
	}
	step := func(what, instance string, wantErr error, wantReads ...bool) {
		t.Helper()
		if err := st.SetMachineInstance(ctx, id, instance, "10.0.0.1"); !errors.Is(err, wantErr) {
			t.Fatalf("%s: SetMachineInstance = %v, want %v", what, err, wantErr)
		}
		if got := rem.took(); !slices.Equal(got, wantReads) {
			t.Errorf("%s: reads serializable %v, want %v", what, got, wantReads)
		}
	}

	step("a change", "i-1", nil, true)
	at1 := revision()
	step("nothing to do, confirmed", "i-1", nil, true, false)
	if got := st.Stats().Confirmed; got != 1 {
		t.Errorf("%d answers confirmed, want 1", got)
	}
	id, saved := "99", id
	step("an error, confirmed", "i-1", ErrNotFound, true, false)
	id = saved

	// Behind: the member answers with the machine at i-1.
	step("another change", "i-2", nil, true)
	rem.at = at1
	conflicts := st.Stats().Conflicts
	step("a change read stale", "i-3", nil, true, false)
	if got := st.Stats().Conflicts - conflicts; got != 1 {
		t.Errorf("the stale read cost %d conflicts, want 1", got)
	}
	if got := instance(); got != "i-3" {
		t.Errorf("instance %q after a change read stale, want i-3", got)
	}
	// Read stale, i-1 is there already: nothing to do, but the
	// linearizable read says otherwise.
	step("nothing to do read stale", "i-1", nil, true, false)
	if got := instance(); got != "i-1" {
		t.Errorf("instance %q after nothing to do read stale, want i-1 (the stale answer was taken)", got)
	}
}

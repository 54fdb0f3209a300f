package state

import (
	"context"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// countingRemote counts the keys etcd returns to reads.
type countingRemote struct {
	etcdserverpb.KVClient
	keys *atomic.Int64
}

func (k countingRemote) Txn(ctx context.Context, r *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	resp, err := k.KVClient.Txn(ctx, r, opts...)
	if err == nil {
		for _, op := range resp.Responses {
			k.keys.Add(int64(len(op.GetResponseRange().GetKvs())))
		}
	}
	return resp, err
}

func (k countingRemote) Range(ctx context.Context, r *etcdserverpb.RangeRequest, opts ...grpc.CallOption) (*etcdserverpb.RangeResponse, error) {
	resp, err := k.KVClient.Range(ctx, r, opts...)
	if err == nil {
		k.keys.Add(int64(len(resp.Kvs)))
	}
	return resp, err
}

// TestSelectModelReadsWhatItSelects checks that the keys SelectModel
// reads do not grow with the rest of the model: the same selections read
// the same keys after another service gains 200 units on 200 machines.
func TestSelectModelReadsWhatItSelects(t *testing.T) {
	ctx := etcdtest.Context(t)
	st, err := New(etcdtest.Client(t), Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	var keys atomic.Int64
	st.etcd.Remote = countingRemote{KVClient: st.etcd.Remote, keys: &keys}
	for _, svc := range []string{"kv", "big"} {
		if _, err := st.AddService(ctx, AddServiceArgs{Name: svc, Charm: &pb.CharmRef{Name: svc, Revision: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := st.AddUnits(ctx, "kv", 3, Placement{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddUnits(ctx, "big", 2, Placement{}); err != nil {
		t.Fatal(err)
	}
	selections := []Selection{{Services: []string{"kv"}}, {Units: []string{"kv/1"}}, {Machines: []string{kv[0].MachineId}}}
	read := func() []int64 {
		var out []int64
		for _, sel := range selections {
			keys.Store(0)
			if _, err := st.SelectModel(ctx, sel); err != nil {
				t.Fatal(err)
			}
			out = append(out, keys.Load())
		}
		return out
	}
	before := read()
	if _, err := st.AddUnits(ctx, "big", 200, Placement{}); err != nil {
		t.Fatal(err)
	}
	after := read()
	for i := range selections {
		if before[i] != after[i] || before[i] > 40 {
			t.Errorf("SelectModel(%+v) read %d keys, then %d with 200 more units elsewhere; want the same few", selections[i], before[i], after[i])
		}
	}
}

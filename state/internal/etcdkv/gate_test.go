package etcdkv

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// busyKV stands in for etcd at the one seam GatedKV has: it refuses the
// first refusals requests as too many, and counts the requests it holds
// at once (each held until release closes, when set).
type busyKV struct {
	clientv3.KV
	refusals          atomic.Int64
	requests          atomic.Int64
	mu                sync.Mutex
	inFlight, maxSeen int
	release           chan struct{}
}

func (k *busyKV) serve() error {
	k.requests.Add(1)
	k.mu.Lock()
	k.inFlight++
	k.maxSeen = max(k.maxSeen, k.inFlight)
	k.mu.Unlock()
	if k.release != nil {
		<-k.release
	}
	k.mu.Lock()
	k.inFlight--
	k.mu.Unlock()
	if k.refusals.Add(-1) >= 0 {
		return rpctypes.ErrGRPCRequestTooManyRequests
	}
	return nil
}

func (k *busyKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if err := k.serve(); err != nil {
		return nil, err
	}
	return &clientv3.PutResponse{}, nil
}

func (k *busyKV) Txn(ctx context.Context) clientv3.Txn { return &busyTxn{k: k} }

type busyTxn struct{ k *busyKV }

func (t *busyTxn) If(...clientv3.Cmp) clientv3.Txn  { return t }
func (t *busyTxn) Then(...clientv3.Op) clientv3.Txn { return t }
func (t *busyTxn) Else(...clientv3.Op) clientv3.Txn { return t }
func (t *busyTxn) Commit() (*clientv3.TxnResponse, error) {
	if err := t.k.serve(); err != nil {
		return nil, err
	}
	return &clientv3.TxnResponse{Succeeded: true}, nil
}

func TestWritesRefusedAsTooManyAreSentAgain(t *testing.T) {
	fake := &busyKV{}
	gate := NewGate(10)
	kv := NewGatedKV(fake, gate, nil)
	ctx := context.Background()

	fake.refusals.Store(3)
	resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.Version("a"), "=", 0)).Then(clientv3.OpPut("a", "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("commit = %v, %v; want success after the refusals", resp, err)
	}
	if got := fake.requests.Load(); got != 4 {
		t.Errorf("etcd saw %d requests, want 4 (three refused, then the write)", got)
	}
	if got := gate.Refused(); got != 3 {
		t.Errorf("busy = %d, want 3", got)
	}

	fake.refusals.Store(1)
	if _, err := kv.Put(ctx, "b", "1"); err != nil {
		t.Fatalf("put: %v", err)
	}

	// A read is never refused for being behind: its error comes back as is.
	fake.refusals.Store(1)
	before := fake.requests.Load()
	if _, err := kv.Txn(ctx).Then(clientv3.OpGet("a")).Commit(); !tooManyRequests(err) {
		t.Errorf("read: %v, want etcd's own error", err)
	}
	if got := fake.requests.Load() - before; got != 1 {
		t.Errorf("read sent %d times, want once", got)
	}
}

func TestWriteRefusedUntilTheCallerGivesUp(t *testing.T) {
	fake := &busyKV{}
	fake.refusals.Store(1 << 30)
	gate := NewGate(10)
	kv := NewGatedKV(fake, gate, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := kv.Txn(ctx).Then(clientv3.OpDelete("a")).Commit()
	if !tooManyRequests(err) {
		t.Fatalf("commit = %v, want etcd's refusal once the context ended", err)
	}
	if gate.Refused() < 2 {
		t.Errorf("busy = %d, want the write sent again meanwhile", gate.Refused())
	}
}

func TestWritesInFlightAreBounded(t *testing.T) {
	fake := &busyKV{release: make(chan struct{})}
	gate := NewGate(3)
	kv := NewGatedKV(fake, gate, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 11)
	send := func(op clientv3.Op) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := kv.Txn(ctx).Then(op).Commit()
			errs <- err
		}()
	}
	held := func() int {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return fake.inFlight
	}
	waitHeld := func(n int) {
		t.Helper()
		poll.UntilSays(t, fmt.Sprintf("%d requests to reach etcd", n), func() (bool, string) {
			h := held()
			return h >= n, fmt.Sprintf("%d did", h)
		})
	}
	for i := 0; i < 10; i++ {
		send(clientv3.OpPut("k", "v"))
	}
	waitHeld(3)
	// A read is not held back by the writes waiting for a slot.
	send(clientv3.OpGet("k"))
	waitHeld(4)
	time.Sleep(20 * time.Millisecond) // room for a write to slip past its slot
	if got := held(); got != 4 {
		t.Errorf("%d requests in etcd, want 3 writes and the read", got)
	}
	close(fake.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := fake.requests.Load(); got != 11 {
		t.Errorf("etcd saw %d requests, want 11", got)
	}
}

// An operation holding a slot writes as often as it retries without
// queueing again, and an operation within it takes no second slot.
func TestHeldSlotServesEveryWriteOfItsHolder(t *testing.T) {
	fake := &busyKV{}
	gate := NewGate(1)
	kv := NewGatedKV(fake, gate, nil)
	ctx, release, err := gate.Hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inner, releaseInner, err := gate.Hold(ctx) // nested: nothing more to take
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := kv.Txn(inner).Then(clientv3.OpPut("k", "v")).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	releaseInner()
	// The one slot is still held: a write of another waits for it.
	other := make(chan error, 1)
	go func() {
		_, err := kv.Txn(context.Background()).Then(clientv3.OpPut("k", "w")).Commit()
		other <- err
	}()
	select {
	case err := <-other:
		t.Fatalf("a write got through while the only slot was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if got := fake.requests.Load(); got != 4 {
		t.Errorf("etcd saw %d writes, want 4", got)
	}
}

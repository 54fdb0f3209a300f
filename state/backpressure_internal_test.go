package state

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// busyKV stands in for etcd at the one seam gatedKV has: it refuses the
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
	var busy atomic.Int64
	kv := newGatedKV(fake, 10, &busy)
	ctx := context.Background()

	fake.refusals.Store(3)
	resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.Version("a"), "=", 0)).Then(clientv3.OpPut("a", "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("commit = %v, %v; want success after the refusals", resp, err)
	}
	if got := fake.requests.Load(); got != 4 {
		t.Errorf("etcd saw %d requests, want 4 (three refused, then the write)", got)
	}
	if got := busy.Load(); got != 3 {
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
	var busy atomic.Int64
	kv := newGatedKV(fake, 10, &busy)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := kv.Txn(ctx).Then(clientv3.OpDelete("a")).Commit()
	if !tooManyRequests(err) {
		t.Fatalf("commit = %v, want etcd's refusal once the context ended", err)
	}
	if busy.Load() < 2 {
		t.Errorf("busy = %d, want the write sent again meanwhile", busy.Load())
	}
}

func TestWritesInFlightAreBounded(t *testing.T) {
	fake := &busyKV{release: make(chan struct{})}
	var busy atomic.Int64
	kv := newGatedKV(fake, 3, &busy)
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
	var busy atomic.Int64
	kv := newGatedKV(fake, 1, &busy)
	ctx, release, err := kv.hold(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inner, releaseInner, err := kv.hold(ctx) // nested: nothing more to take
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

// gaugedRemote passes requests to etcd, refusing the first refusals
// writes as too many, and counts the writes it holds at once.
type gaugedRemote struct {
	etcdserverpb.KVClient
	refusals          atomic.Int64
	mu                sync.Mutex
	inFlight, maxSeen int
}

func (g *gaugedRemote) Txn(ctx context.Context, r *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	if len(r.Success) == 0 || r.Success[0].GetRequestRange() != nil {
		return g.KVClient.Txn(ctx, r, opts...) // a read
	}
	g.mu.Lock()
	g.inFlight++
	g.maxSeen = max(g.maxSeen, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	time.Sleep(time.Millisecond) // long enough for others to pile up
	if g.refusals.Add(-1) >= 0 {
		return nil, rpctypes.ErrGRPCRequestTooManyRequests
	}
	return g.KVClient.Txn(ctx, r, opts...)
}

// gatedState returns a State in namespace ns (a new one when "") with
// the given write slots, and the machines it added.
func gatedState(t *testing.T, ns string, slots, machines int) (*State, []*pb.Machine, context.Context) {
	t.Helper()
	ctx := etcdtest.Context(t)
	if ns == "" {
		ns = etcdtest.Namespace(t)
	}
	st, err := New(etcdtest.Client(t), Config{Namespace: ns, MaxWritesInFlight: slots})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := st.AddMachines(ctx, machines)
	if err != nil {
		t.Fatal(err)
	}
	return st, ms, ctx
}

// A State's operations write through its gate: no more at once than it
// allows, and those etcd refuses as too many are sent again.
func TestOperationsWriteThroughTheGate(t *testing.T) {
	st, ms, ctx := gatedState(t, "", 2, 20)
	g := &gaugedRemote{KVClient: st.remote}
	g.refusals.Store(3)
	st.remote = g
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.SetMachineInstance(ctx, m.Id, "i-"+m.Id, "10.0.0.1"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if g.maxSeen > 2 {
		t.Errorf("%d writes in etcd at once, want at most 2", g.maxSeen)
	}
	if got := st.Stats().Busy; got != 3 {
		t.Errorf("%d writes sent again after a refusal, want 3", got)
	}
	for _, m := range ms {
		got, err := st.Machine(ctx, m.Id)
		if err != nil {
			t.Fatal(err)
		}
		if got.InstanceId != "i-"+m.Id {
			t.Errorf("machine %s has instance %q, want i-%s", m.Id, got.InstanceId, m.Id)
		}
	}
}

// An operation reads once it holds its slot, not before: what it read
// does not age while it queues, so a write meanwhile to what it reads
// costs it no conflict.
func TestOperationReadsInItsSlot(t *testing.T) {
	ns := etcdtest.Namespace(t)
	st, ms, ctx := gatedState(t, ns, 1, 1)
	id := ms[0].Id
	_, release, err := st.gate.hold(ctx) // the only slot
	if err != nil {
		t.Fatal(err)
	}
	reads := st.Stats().Reads
	done := make(chan error, 1)
	go func() { done <- st.SetMachineInstance(ctx, id, "i-1", "10.0.0.1") }()
	// Give it the time to read, were it to read before its slot.
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline) && st.Stats().Reads == reads; {
		time.Sleep(time.Millisecond)
	}
	// The machine changes while the operation waits for the slot.
	raw := etcdtest.Client(t)
	resp, err := raw.Get(ctx, ns+MachineKey(id))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read machine %s: %v", id, err)
	}
	if _, err := raw.Put(ctx, ns+MachineKey(id), string(resp.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := st.Stats().Conflicts; got != 0 {
		t.Errorf("%d conflicts, want none: the operation read before it held its slot", got)
	}
}

// A State is busy while as many writers wait for a slot as there are
// slots, and not once they have theirs.
func TestBusyWhileWritesQueue(t *testing.T) {
	st, ms, ctx := gatedState(t, "", 2, 2)
	var releases []func()
	for range 2 {
		_, release, err := st.gate.hold(ctx)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	if st.Busy() {
		t.Fatal("busy with every slot taken but nobody waiting")
	}
	done := make(chan error, 2)
	for _, m := range ms {
		go func() { done <- st.SetMachineInstance(ctx, m.Id, "i-"+m.Id, "10.0.0.1") }()
	}
	poll.UntilSays(t, "busy, writers waiting for 2 slots", func() (bool, string) {
		return st.Busy(), fmt.Sprintf("not busy with %d writers waiting", st.gate.waiting.Load())
	})
	for _, release := range releases {
		release()
	}
	for range ms {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st.Busy() || st.gate.waiting.Load() != 0 {
		t.Errorf("busy %v with %d waiting once every writer is done", st.Busy(), st.gate.waiting.Load())
	}
}

// holdTheOnlySlot holds a State's only write slot and queues a write
// behind it (machine's instance recorded). stillQueued fails the test if
// that write went through; release frees the slot and waits for it.
func holdTheOnlySlot(t *testing.T, ctx context.Context, st *State, machine string) (stillQueued, release func()) {
	t.Helper()
	_, free, err := st.gate.hold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() { queued <- st.SetMachineInstance(ctx, machine, "i-1", "10.0.0.1") }()
	poll.Until(t, "the write queued", func() bool { return st.gate.waiting.Load() != 0 })
	stillQueued = func() {
		t.Helper()
		select {
		case err := <-queued:
			t.Fatalf("the queued write went through while the only slot was held: %v", err)
		default:
		}
	}
	release = func() {
		t.Helper()
		free()
		if err := <-queued; err != nil {
			t.Fatal(err)
		}
	}
	return stillQueued, release
}

// A cascade's batches (a dying service's units set dying) go ahead of the
// writes queued for the State's slots: they are what that queue's work
// waits on. Other writes still wait their turn.
func TestCascadeGoesAheadOfTheQueue(t *testing.T) {
	st, ms, ctx := gatedState(t, "", 1, 2)
	if _, err := st.AddService(ctx, AddServiceArgs{Name: "app", Charm: &pb.CharmRef{Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	units, err := st.AddUnits(ctx, "app", 40, Placement{Machine: ms[0].Id})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.Name
	}
	stillQueued, release := holdTheOnlySlot(t, ctx, st, ms[1].Id)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.setUnitsDying(dctx, names); err != nil {
		t.Fatalf("setUnitsDying with the only slot held: %v", err)
	}
	for _, n := range names {
		u, err := st.Unit(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if u.Life != pb.Life_LIFE_DYING {
			t.Fatalf("%s is %v, want dying", n, u.Life)
		}
	}
	stillQueued()
	release()
}

// A write whose context is marked Ahead (an operator's) goes through while
// every slot is held and others queue for one; the queued write still
// waits its turn.
func TestAheadGoesAheadOfTheQueue(t *testing.T) {
	st, ms, ctx := gatedState(t, "", 1, 2)
	stillQueued, release := holdTheOnlySlot(t, ctx, st, ms[1].Id)
	if IsAhead(ctx) {
		t.Fatal("IsAhead(a plain context) = true")
	}
	actx, cancel := context.WithTimeout(Ahead(ctx), 10*time.Second)
	defer cancel()
	if !IsAhead(actx) {
		t.Fatal("IsAhead(Ahead(ctx)) = false")
	}
	if err := st.DestroyMachine(actx, ms[0].Id, DestroyOptions{}); err != nil {
		t.Fatalf("DestroyMachine ahead, with the only slot held: %v", err)
	}
	m, err := st.Machine(ctx, ms[0].Id)
	if err != nil {
		t.Fatal(err)
	}
	if m.Life != pb.Life_LIFE_DYING {
		t.Fatalf("machine %s is %v, want dying", ms[0].Id, m.Life)
	}
	stillQueued()
	release()
}

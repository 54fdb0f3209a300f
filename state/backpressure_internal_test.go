package state

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

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
	g := &gaugedRemote{KVClient: st.etcd.Remote}
	g.refusals.Store(3)
	st.etcd.Remote = g
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
	_, release, err := st.hold(ctx) // the only slot
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
		_, release, err := st.hold(ctx)
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
		return st.Busy(), fmt.Sprintf("not busy with %d writers waiting", st.gate.Waiting())
	})
	for _, release := range releases {
		release()
	}
	for range ms {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if st.Busy() || st.gate.Waiting() != 0 {
		t.Errorf("busy %v with %d waiting once every writer is done", st.Busy(), st.gate.Waiting())
	}
}

// holdTheOnlySlot holds a State's only write slot and queues a write
// behind it (machine's instance recorded). stillQueued fails the test if
// that write went through; release frees the slot and waits for it.
func holdTheOnlySlot(t *testing.T, ctx context.Context, st *State, machine string) (stillQueued, release func()) {
	t.Helper()
	_, free, err := st.hold(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() { queued <- st.SetMachineInstance(ctx, machine, "i-1", "10.0.0.1") }()
	poll.Until(t, "the write queued", func() bool { return st.gate.Waiting() != 0 })
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

// A write whose context has priority (WithPriority: an operator's) goes through while
// every slot is held and others queue for one; the queued write still
// waits its turn.
func TestPriorityGoesAheadOfTheQueue(t *testing.T) {
	st, ms, ctx := gatedState(t, "", 1, 2)
	stillQueued, release := holdTheOnlySlot(t, ctx, st, ms[1].Id)
	if HasPriority(ctx) {
		t.Fatal("HasPriority(a plain context) = true")
	}
	actx, cancel := context.WithTimeout(WithPriority(ctx), 10*time.Second)
	defer cancel()
	if !HasPriority(actx) {
		t.Fatal("HasPriority(WithPriority(ctx)) = false")
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

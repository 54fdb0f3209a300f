package state

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
)

// The agents' presence keys share one lease: a key goes when its presence
// closes, and the lease when the last does. A key put again since (the
// agent present through another controller) is not taken by the old
// presence's close.
func TestPresencesShareALease(t *testing.T) {
	ctx := etcdtest.Context(t)
	c := etcdtest.Client(t)
	ns := etcdtest.Namespace(t)
	st, err := New(c, Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(c, Config{Namespace: ns}) // another controller
	if err != nil {
		t.Fatal(err)
	}
	present := func() map[string]bool {
		t.Helper()
		p, err := st.Presences(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, err := st.Present(ctx, "machine-0", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Present(ctx, "machine-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := present(); !got["machine-0"] || !got["machine-1"] {
		t.Fatalf("present = %v, want machine-0 and machine-1", got)
	}
	leaseOf := func(tag string) clientv3.LeaseID {
		t.Helper()
		r, err := c.Get(ctx, ns+presenceKey(tag))
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get %s: %v, %v", tag, r, err)
		}
		return clientv3.LeaseID(r.Kvs[0].Lease)
	}
	shared := leaseOf("machine-0")
	if l := leaseOf("machine-1"); l != shared {
		t.Fatalf("machine-1's presence is on lease %x, machine-0's on %x: want one", l, shared)
	}

	// machine-1 reconnects through the other controller, then the old
	// stream ends.
	b2, err := other.Present(ctx, "machine-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	b.Close()
	if got := present(); !got["machine-1"] {
		t.Fatalf("present = %v: the old presence's close took machine-1's new key", got)
	}
	a.Close()
	if got := present(); got["machine-0"] {
		t.Fatalf("present = %v, want machine-0 gone once closed", got)
	}
	ttl, err := c.TimeToLive(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Errorf("the shared lease has %d s to live once its last presence closed, want it revoked", ttl.TTL)
	}
}

// When the shared lease lapses, every presence on it says so (Lost), and
// the next presence gets a new lease.
func TestPresencesLostWithTheirLease(t *testing.T) {
	ctx := etcdtest.Context(t)
	c := etcdtest.Client(t)
	st, err := New(c, Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.Present(ctx, "machine-0", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := st.Present(ctx, "machine-1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st.presences.mu.Lock()
	id := st.presences.leases[10*time.Second].id
	st.presences.mu.Unlock()
	if _, err := c.Revoke(ctx, id); err != nil { // as if it ran out
		t.Fatal(err)
	}
	for _, p := range []*Presence{a, b} {
		select {
		case <-p.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("a presence on the revoked lease was not lost")
		}
	}
	n, err := st.Present(ctx, "machine-0", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	select {
	case <-n.Lost():
		t.Fatal("a new presence is lost at once: it was put on the lapsed lease")
	default:
	}
	if got, err := st.Presences(ctx); err != nil || !got["machine-0"] {
		t.Fatalf("present = %v, %v; want machine-0 again", got, err)
	}
}

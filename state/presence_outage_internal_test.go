package state

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
)

// A presence whose key cannot be deleted as it closes (etcd out of reach)
// tries again until it can: the lease, kept alive by the other presences,
// would otherwise keep the key, and the agent present, for as long as any
// of them is.
func TestPresenceCloseOutlastsAnOutage(t *testing.T) {
	ctx := etcdtest.Context(t)
	ns := etcdtest.Namespace(t)
	px := etcdtest.NewCutProxy(t, etcdtest.Server(t).Endpoint())
	c, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{px.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := New(c, Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	st.presenceDeleteTimeout = 100 * time.Millisecond
	gone, err := st.Present(ctx, "machine-0", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stays, err := st.Present(ctx, "machine-1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stays.Close()

	px.Cut(true)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		gone.Close()
	}()
	// The outage lasts several tries.
	time.Sleep(time.Second)
	select {
	case <-closed:
		t.Fatal("Close returned while etcd was out of reach, its key left behind")
	default:
	}
	px.Cut(false)
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return once etcd was back")
	}
	direct := etcdtest.Client(t)
	for tag, want := range map[string]int{"machine-0": 0, "machine-1": 1} {
		r, err := direct.Get(ctx, ns+presenceKey(tag))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != want {
			t.Errorf("%s's presence keys = %d after the outage, want %d", tag, len(r.Kvs), want)
		}
	}
}

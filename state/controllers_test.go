package state_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lifelinehq/lifeline/etcdtest"
	"github.com/lifelinehq/lifeline/state"
)

// The first CA offered becomes the model's; every later offer gets it back,
// however many controllers race.
func TestSharedCAFirstWins(t *testing.T) {
	st, ctx := newState(t)
	if _, _, err := st.SharedCA(ctx, nil, []byte("k")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("SharedCA without a certificate: %v, want ErrInvalid", err)
	}
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cert, key, err := st.SharedCA(ctx, []byte{'c', byte('0' + i)}, []byte{'k', byte('0' + i)})
			if err != nil {
				t.Error(err)
				return
			}
			if cert[1] != key[1] {
				t.Errorf("certificate %q came with key %q", cert, key)
			}
			got[i] = cert
		}()
	}
	wg.Wait()
	for _, c := range got {
		if !bytes.Equal(c, got[0]) {
			t.Fatalf("controllers got different CAs: %q", got)
		}
	}
}

// Registered controllers are listed with their addresses while they keep
// their lease, the election's leader marked and its addresses first.
func TestControllersRegistry(t *testing.T) {
	ns := etcdtest.Namespace(t)
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	a, err := st.RegisterController(ctx, "a", []string{"10.0.0.1:17070"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := st.RegisterController(ctx, "b", []string{"10.0.0.2:17070", "10.0.0.1:17070"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterController(ctx, "x/y", nil, time.Second); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("RegisterController(x/y): %v, want ErrInvalid", err)
	}

	// b leads the namespace's election.
	sess, err := concurrency.NewSession(etcdtest.Client(t), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := concurrency.NewElection(sess, ns+state.LeaderElection).Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	cs, err := st.Controllers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ID != "a" || cs[0].Leader || cs[1].ID != "b" || !cs[1].Leader {
		t.Fatalf("Controllers = %+v, want a, and b leading", cs)
	}
	addrs, err := st.ControllerAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.2:17070", "10.0.0.1:17070"}; !slices.Equal(addrs, want) {
		t.Fatalf("ControllerAddresses = %v, want %v", addrs, want)
	}

	b.Close()
	cs, err = st.Controllers(context.Background())
	if err != nil || len(cs) != 1 || cs[0].ID != "a" {
		t.Fatalf("after b closed: Controllers = %+v, %v; want only a", cs, err)
	}
}

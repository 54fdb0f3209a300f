package state_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The first CA offered becomes the model's; every later offer gets it back,
// however many controllers race.
func TestSharedCAFirstWins(t *testing.T) {
	st, ctx := newState(t)
	if _, err := st.SharedCA(ctx, nil, []byte("k")); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("SharedCA without a certificate: %v, want ErrInvalid", err)
	}
	if _, err := st.ModelCA(ctx); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("ModelCA of a model without a CA: %v, want ErrNotFound", err)
	}
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca, err := st.SharedCA(ctx, []byte{'c', byte('0' + i)}, []byte{'k', byte('0' + i)})
			if err != nil {
				t.Error(err)
				return
			}
			if ca.Cert[1] != ca.Key[1] || ca.KeyRevision == 0 {
				t.Errorf("certificate %q came with key %q at revision %d", ca.Cert, ca.Key, ca.KeyRevision)
			}
			got[i] = ca.Cert
		}()
	}
	wg.Wait()
	for _, c := range got {
		if !bytes.Equal(c, got[0]) {
			t.Fatalf("controllers got different CAs: %q", got)
		}
	}
	stored, err := st.ModelCA(ctx)
	if err != nil || !bytes.Equal(stored.Cert, got[0]) {
		t.Errorf("ModelCA = %q, %v; want %q", stored.Cert, err, got[0])
	}
}

// sealedPEM stands for a sealed CA key (package pki's block type).
func sealedPEM(s string) []byte {
	return []byte("-----BEGIN LIFELINE SEALED CA KEY-----\n" + base64.StdEncoding.EncodeToString([]byte(s)) + "\n-----END LIFELINE SEALED CA KEY-----\n")
}

// Controllers that seal the same stored key at once (each from what it
// read) replace it once: the others are told, and given the key stored,
// so that no controller's key is overwritten by another's it cannot open.
func TestReplaceCAKeyOnceFromOneRead(t *testing.T) {
	st, ctx := newState(t)
	clear := []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	read, err := st.SharedCA(ctx, []byte("cert"), clear)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ReplaceCAKey(ctx, state.StoredCA{Cert: read.Cert}, sealedPEM("x")); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("ReplaceCAKey without the revision read: %v, want ErrInvalid", err)
	}
	if _, ok, err := st.ReplaceCAKey(ctx, state.StoredCA{Cert: []byte("another"), KeyRevision: read.KeyRevision}, sealedPEM("x")); ok || err != nil {
		t.Errorf("ReplaceCAKey of another certificate = %t, %v; want false, nil", ok, err)
	}
	const n = 8
	var wg sync.WaitGroup
	won := make([]bool, n)
	after := make([]state.StoredCA, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca, ok, err := st.ReplaceCAKey(ctx, read, sealedPEM(fmt.Sprint(i)))
			if err != nil {
				t.Error(err)
			}
			won[i], after[i] = ok, ca
		}()
	}
	wg.Wait()
	winner := slices.Index(won, true)
	if winner < 0 || slices.Index(won[winner+1:], true) >= 0 {
		t.Fatalf("ReplaceCAKey from one read succeeded for %v, want exactly one", won)
	}
	stored, err := st.ModelCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored.Key, sealedPEM(fmt.Sprint(winner))) {
		t.Errorf("the stored key is %q, want the winner's", stored.Key)
	}
	for i, ca := range after {
		if !bytes.Equal(ca.Key, stored.Key) || ca.KeyRevision != stored.KeyRevision {
			t.Errorf("ReplaceCAKey %d answered key %q at %d, want the one stored (%d)", i, ca.Key, ca.KeyRevision, stored.KeyRevision)
		}
	}
}

// A controller join token works once, however many use it at once; a
// refusal of its record (a wrong secret, its expiry) leaves it in place.
func TestControllerJoinWorksOnce(t *testing.T) {
	st, ctx := newState(t)
	const id = "0123456789abcdef"
	j := &pb.ControllerJoin{SecretHash: "sha256:x", ExpiresUnixNano: time.Now().Add(time.Hour).UnixNano(), IssuedBy: "c-1"}
	for _, tc := range []struct {
		id string
		j  *pb.ControllerJoin
	}{
		{"nothex0123456789", j}, {"0123", j},
		{id, &pb.ControllerJoin{ExpiresUnixNano: 1}},
		{id, &pb.ControllerJoin{SecretHash: "sha256:x"}},
	} {
		if err := st.AddControllerJoin(ctx, tc.id, tc.j); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("AddControllerJoin(%q, %v) = %v, want ErrInvalid", tc.id, tc.j, err)
		}
	}
	if err := st.AddControllerJoin(ctx, id, j); err != nil {
		t.Fatal(err)
	}
	if err := st.AddControllerJoin(ctx, id, j); !errors.Is(err, state.ErrAlreadyExists) {
		t.Errorf("AddControllerJoin twice = %v, want ErrAlreadyExists", err)
	}
	refusal := errors.New("wrong secret")
	if err := st.UseControllerJoin(ctx, id, func(*pb.ControllerJoin) error { return refusal }); err != refusal {
		t.Errorf("UseControllerJoin refused = %v, want the refusal", err)
	}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.UseControllerJoin(ctx, id, func(got *pb.ControllerJoin) error {
				if got.IssuedBy != "c-1" || got.SecretHash != j.SecretHash {
					return fmt.Errorf("record %v, want %v", got, j)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	used := 0
	for _, err := range errs {
		switch {
		case err == nil:
			used++
		case !errors.Is(err, state.ErrNotFound):
			t.Errorf("UseControllerJoin = %v, want nil or ErrNotFound", err)
		}
	}
	if used != 1 {
		t.Errorf("%d of %d callers used one token, want 1", used, n)
	}
	if err := st.UseControllerJoin(ctx, id, func(*pb.ControllerJoin) error { return nil }); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("UseControllerJoin after its use = %v, want ErrNotFound", err)
	}
}

// A token's record is bound to a lease that outlives its expiry by a
// minute, so that etcd removes the records of tokens nobody used.
func TestControllerJoinRecordLeased(t *testing.T) {
	ns := etcdtest.Namespace(t)
	c := etcdtest.Client(t)
	st, err := state.New(c, state.Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	expires := time.Now().Add(time.Hour)
	if err := st.AddControllerJoin(ctx, "00000000000000aa", &pb.ControllerJoin{SecretHash: "sha256:x", ExpiresUnixNano: expires.UnixNano()}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, ns+"controller-joins/00000000000000aa")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the record is %v, %v; want one, bound to a lease", resp.Kvs, err)
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := time.Duration(ttl.TTL)*time.Second, time.Until(expires)+time.Minute; got < want-time.Minute || got > want+time.Second {
		t.Errorf("the record's lease has %s to live, want about %s", got, want)
	}
}

// The snapshot's checker refuses a CA key in clear and malformed join
// token records.
func TestCheckInvariantsControllerKeys(t *testing.T) {
	j, _ := proto.Marshal(&pb.ControllerJoin{SecretHash: "sha256:x", ExpiresUnixNano: 1})
	for _, tc := range []struct {
		name   string
		values map[string][]byte
		want   string
	}{
		{"a sealed key", map[string][]byte{"controller/ca-cert": []byte("c"), "controller/ca-key": sealedPEM("k"), "controller-joins/0123456789abcdef": j}, ""},
		{"a key in clear", map[string][]byte{"controller/ca-cert": []byte("c"), "controller/ca-key": []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")},
			"controller/ca-key holds the CA's private key in clear: whoever reads etcd may sign as the controller"},
		{"a key without its certificate", map[string][]byte{"controller/ca-key": sealedPEM("k")},
			"the model's CA is stored incompletely (controller/ca-cert false, controller/ca-key true)"},
		{"a bad token id", map[string][]byte{"controller-joins/x": j}, "controller-joins/x: invalid controller join token id"},
		{"a token without expiry", map[string][]byte{"controller-joins/0123456789abcdef": {}},
			"controller-joins/0123456789abcdef: a controller join token without a secret hash or expiry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := state.CheckInvariants(&state.Snapshot{Revision: 1, Values: tc.values})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !containsLine(err.Error(), tc.want)) {
				t.Errorf("CheckInvariants = %v, want %q", err, tc.want)
			}
		})
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

package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state/internal/etcdkv"
)

// TestCharmCollector stores revisions of charms, some used by services,
// and an archive no revision names: the collector removes, once two passes
// have found them unneeded, the revisions no service uses but the latest
// of each charm, with their archives, and the unnamed archive; a revision
// a service starts using between the passes stays, and so does one only a
// service's kept revision names (a rollback may return to it).
func TestCharmCollector(t *testing.T) {
	st, err := New(etcdtest.Client(t), Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	add := func(name, archive string) *pb.Charm {
		t.Helper()
		c, err := st.AddCharm(ctx, &pb.Charm{Name: name}, []byte(archive))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	deploy := func(svc string, c *pb.Charm) {
		t.Helper()
		if _, err := st.AddService(ctx, AddServiceArgs{Name: svc, Charm: &pb.CharmRef{Name: c.Name, Revision: c.Revision, Sha256: c.Sha256}}); err != nil {
			t.Fatal(err)
		}
	}
	x1, x2, x3 := add("x", "x one"), add("x", "x two"), add("x", "x three")
	y1 := add("y", "y one")
	z1, _ := add("z", "z one"), add("z", "z two")
	deploy("s", x1)
	w1, w2, w3 := add("w", "w one"), add("w", "w two"), add("w", "w three")
	deploy("r", w1)
	if _, err := st.ChangeSpec(ctx, "r", SpecChange{Reason: "refresh", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		return &pb.ServiceSpec{Charm: &pb.CharmRef{Name: w2.Name, Revision: w2.Revision, Sha256: w2.Sha256}, Config: head.GetSpec().GetConfig()}, nil, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.kv.Put(ctx, charmChunkKey("0badc0de", 0), "left by a failed upload"); err != nil {
		t.Fatal(err)
	}

	c := NewCharmCollector(st, time.Hour)
	if n, err := c.Pass(ctx); n != 0 || err != nil {
		t.Fatalf("first pass removed %d, %v; want nothing: found unneeded only once", n, err)
	}
	deploy("t", z1) // used now: stays
	if n, err := c.Pass(ctx); n != 2 || err != nil {
		t.Fatalf("second pass removed %d, %v; want x revision 2 and the unnamed archive", n, err)
	}
	for _, want := range []struct {
		c    *pb.Charm
		kept bool
	}{{x1, true}, {x2, false}, {x3, true}, {y1, true}, {z1, true}, {w1, true}, {w2, true}, {w3, true}} {
		_, err := st.Charm(ctx, want.c.Name, want.c.Revision)
		if kept := err == nil; kept != want.kept {
			t.Errorf("charm %s revision %d kept = %v (%v), want %v", want.c.Name, want.c.Revision, kept, err, want.kept)
		}
		if !want.kept && !errors.Is(err, ErrNotFound) {
			t.Errorf("charm %s revision %d: %v, want ErrNotFound", want.c.Name, want.c.Revision, err)
		}
		if want.kept {
			if _, err := st.CharmArchive(ctx, want.c); err != nil {
				t.Errorf("the archive of kept charm %s revision %d: %v", want.c.Name, want.c.Revision, err)
			}
		}
	}
	for _, sha := range []string{x2.Sha256, "0badc0de"} {
		kvs, err := st.listAll(ctx, charmBlobsPrefix+sha+"/", true)
		if err != nil || len(kvs) != 0 {
			t.Errorf("archive %s: %d chunks left (%v), want none", sha, len(kvs), err)
		}
	}
	if _, err := st.charmBySha(ctx, "x", x2.Sha256); !errors.Is(err, ErrNotFound) {
		t.Errorf("x revision 2's index: %v, want it removed", err)
	}
}

// TestCharmRevisionRemovalWaitsForServices removes a revision the collector
// found unused, after a service started using it: the removal's
// transaction, asserting no service changed since the read, does nothing.
func TestCharmRevisionRemovalWaitsForServices(t *testing.T) {
	st, err := New(etcdtest.Client(t), Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	c1, err := st.AddCharm(ctx, &pb.Charm{Name: "x"}, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddCharm(ctx, &pb.Charm{Name: "x"}, []byte("two")); err != nil {
		t.Fatal(err)
	}
	g, err := st.charmGarbage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := g.revisions["rev/x/1"]
	if rec == nil {
		t.Fatalf("x revision 1 is not found unused: %v", g.revisions)
	}
	if _, err := st.AddService(ctx, AddServiceArgs{Name: "s", Charm: &pb.CharmRef{Name: "x", Revision: c1.Revision}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.removeCharmRevision(ctx, rec, g.rev); ok || err != nil {
		t.Fatalf("removal of a revision a service uses since the read = %v, %v; want nothing done", ok, err)
	}
	if _, err := st.CharmArchive(ctx, c1); err != nil {
		t.Errorf("x revision 1's archive: %v, want it kept", err)
	}
}

// TestCharmStoreLimit fills the charm store to its limit: the archive that
// would go past it is refused as ErrFull, naming the limit, and leaves
// nothing behind.
func TestCharmStoreLimit(t *testing.T) {
	st, err := New(etcdtest.Client(t), Config{Namespace: etcdtest.Namespace(t), CharmStoreLimit: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	two := strings.Repeat("a", 2<<20)
	if _, err := st.AddCharm(ctx, &pb.Charm{Name: "x"}, []byte(two)); err != nil {
		t.Fatal(err)
	}
	_, err = st.AddCharm(ctx, &pb.Charm{Name: "y"}, []byte(two+"b"))
	if want := "the charm store holds 2 MiB of its 3 MiB limit: charm y's archive of 2.0 MiB does not fit"; !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), want) {
		t.Fatalf("AddCharm past the limit = %v, want ErrFull saying %q", err, want)
	}
	if n, err := st.CharmStoreBytes(ctx); n != 2<<20 || err != nil {
		t.Errorf("CharmStoreBytes = %d, %v; want 2 MiB", n, err)
	}
	kvs, err := st.listAll(ctx, charmBlobsPrefix, true)
	if err != nil || len(kvs) != 2 {
		t.Errorf("%d chunks stored (%v), want x's 2", len(kvs), err)
	}
}

// failingPuts fails the put of one key, as a lost connection or an etcd
// out of space would, without sending it.
type failingPuts struct {
	clientv3.KV
	key string
}

func (f failingPuts) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	if key == f.key {
		return nil, errors.New("injected: the connection was lost")
	}
	return f.KV.Put(ctx, key, val, opts...)
}

// TestFailedUploadLeavesNoArchive fails an upload at its third chunk: the
// chunks it wrote are removed, and a charm stored before keeps its own.
func TestFailedUploadLeavesNoArchive(t *testing.T) {
	st, err := New(etcdtest.Client(t), Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	kept, err := st.AddCharm(ctx, &pb.Charm{Name: "x"}, []byte(strings.Repeat("k", 3<<20)))
	if err != nil {
		t.Fatal(err)
	}
	archive := []byte(strings.Repeat("f", 5<<20))
	sum := sha256.Sum256(archive)
	sha := hex.EncodeToString(sum[:])
	st.kv.(*etcdkv.GatedKV).KV = failingPuts{KV: st.kv.(*etcdkv.GatedKV).KV, key: charmChunkKey(sha, 2)}
	if _, err := st.AddCharm(ctx, &pb.Charm{Name: "x"}, archive); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("AddCharm with its third chunk failing = %v, want the failure", err)
	}
	kvs, err := st.listAll(ctx, charmBlobsPrefix, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if strings.HasPrefix(string(kv.Key), charmBlobsPrefix+sha) {
			t.Errorf("a chunk of the failed upload is left: %s", kv.Key)
		}
	}
	if len(kvs) != 3 {
		t.Errorf("%d chunks stored, want the 3 of the charm stored before", len(kvs))
	}
	if _, err := st.CharmArchive(ctx, kept); err != nil {
		t.Errorf("the archive of the charm stored before: %v", err)
	}
}

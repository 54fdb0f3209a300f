package etcdkv

import (
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// A KV's transactions and reads stay in its namespace and hand keys back
// without it, on either backend (-etcdtest.backend).
func TestReadAndCommitInNamespace(t *testing.T) {
	ctx, c, ns := etcdtest.Context(t), etcdtest.Client(t), etcdtest.Namespace(t)
	kv := New(c, NewGate(4), Config{Namespace: ns})
	// A key just past the namespace, which no read of the KV may see.
	if _, err := c.Put(ctx, PrefixEnd(ns)+"x", "outside"); err != nil {
		t.Fatal(err)
	}
	ok, rev, err := kv.Commit(ctx,
		[]Cond{{Key: "a", Result: Equal}, {Key: "b/", End: PrefixEnd("b/"), Result: Equal}},
		[]Write{{Key: "a", Value: []byte("1")}, {Key: "b/1", Value: []byte("x")}, {Key: "b/2", Value: []byte("y")}})
	if err != nil || !ok || rev == 0 {
		t.Fatalf("Commit = %v, %d, %v; want it committed", ok, rev, err)
	}
	ok, _, err = kv.Commit(ctx, []Cond{{Key: "a", Result: Equal}}, []Write{{Key: "a", Value: []byte("2")}})
	if err != nil || ok {
		t.Fatalf("Commit of a present key asserted absent = %v, %v; want false", ok, err)
	}
	got, ranges, err := kv.Read(ctx, Key("a"), Prefix("b/", 0), Count("b/"), Exists("c"), LastKey("b/"), Prefix("b/", 1))
	if err != nil {
		t.Fatal(err)
	}
	if got != rev {
		t.Errorf("Read at revision %d, want %d", got, rev)
	}
	if kvs := ranges[0].Kvs; len(kvs) != 1 || string(kvs[0].Key) != "a" || string(kvs[0].Value) != "1" {
		t.Errorf("Key(a) = %v, want a=1", kvs)
	}
	if kvs := ranges[1].Kvs; len(kvs) != 2 || string(kvs[0].Key) != "b/1" || string(kvs[1].Key) != "b/2" {
		t.Errorf("Prefix(b/) = %v, want b/1 and b/2", kvs)
	}
	if ranges[2].Count != 2 || ranges[3].Count != 0 {
		t.Errorf("Count(b/) = %d, Exists(c) = %d; want 2 and 0", ranges[2].Count, ranges[3].Count)
	}
	if kvs := ranges[4].Kvs; len(kvs) != 1 || string(kvs[0].Key) != "b/2" || kvs[0].Value != nil {
		t.Errorf("LastKey(b/) = %v, want b/2 without its value", kvs)
	}
	if !ranges[5].More || len(ranges[5].Kvs) != 1 {
		t.Errorf("Prefix(b/, 1) = %d keys, more %v; want 1 and more", len(ranges[5].Kvs), ranges[5].More)
	}
	all, err := kv.ReadRange(ctx, Get{Key: "\x00", End: "\x00"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Kvs) != 3 || all.Rev != rev {
		t.Errorf("every key of the namespace = %d keys at %d, want 3 at %d", len(all.Kvs), all.Rev, rev)
	}
	ok, _, err = kv.Commit(ctx, []Cond{{Key: "b/", End: PrefixEnd("b/"), Mod: true, Result: Less, Rev: rev + 1}},
		[]Write{{Key: "b/", End: PrefixEnd("b/"), Del: true}, {Key: "a", Del: true}})
	if err != nil || !ok {
		t.Fatalf("Commit of the deletions = %v, %v", ok, err)
	}
	left, err := c.Get(ctx, PrefixEnd(ns)+"x")
	if err != nil || len(left.Kvs) != 1 {
		t.Fatalf("the key outside the namespace: %v, %v; want it kept", left, err)
	}
}

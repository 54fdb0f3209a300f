package main

import (
	"os"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
)

func TestMain(m *testing.M) {
	code := etcdtest.Run(m, etcdtest.Options{})
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// emptyAfter finds the revision at which the last entity key went, past
// later changes to keys that are not the model's entities.
func TestEmptyAfter(t *testing.T) {
	ctx, c, ns := etcdtest.Context(t), etcdtest.Client(t), etcdtest.Namespace(t)
	put := func(k string) int64 {
		t.Helper()
		r, err := c.Put(ctx, ns+k, "x")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	del := func(k string) int64 {
		t.Helper()
		r, err := c.Delete(ctx, ns+k)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	put("units/bench/0")
	start := put("scopes/1/bench/0")
	del("units/bench/0")
	put("seq/units/bench")
	if _, left, cur, err := emptyAfter(ctx, c, ns, start); err != nil || left != 1 {
		t.Fatalf("emptyAfter with a scope left = %d keys left at %d, %v; want 1", left, cur, err)
	}
	last := del("scopes/1/bench/0")
	put("seq/units/bench")
	now := put("lifeline-bench-clock")
	empty, left, cur, err := emptyAfter(ctx, c, ns, start)
	if err != nil || left != 0 || empty != last || cur != now {
		t.Fatalf("emptyAfter = %d (left %d, at %d), %v; want %d, read at %d", empty, left, cur, err, last, now)
	}
	if empty, _, _, err := emptyAfter(ctx, c, ns, now-1); err != nil || empty != now {
		t.Fatalf("emptyAfter from the revision before the current = %d, %v; want %d", empty, err, now)
	}
}

package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
)

// TestTransactionOverLimitIsInvalid commits a change whose writes are over
// MaxTxnBytes, which no operation's own limits let through: it is refused
// before etcd, as ErrInvalid naming the limit, and writes nothing.
func TestTransactionOverLimitIsInvalid(t *testing.T) {
	st, err := New(etcdtest.Client(t), Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	c := &change{}
	c.putRaw("a", strings.Repeat("x", 1<<20))
	c.putRaw("b", strings.Repeat("x", 512<<10))
	ok, err := st.commit(ctx, c)
	if want := "a transaction's writes would be 1.5 MiB: at most 1.2 MiB"; ok || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("commit of 1.5 MiB = %v, %v; want ErrInvalid saying %q", ok, err, want)
	}
	r, err := st.read(ctx, get("a"), get("b"))
	if err != nil {
		t.Fatal(err)
	}
	if r.one(0) != nil || r.one(1) != nil {
		t.Errorf("a refused transaction wrote its keys")
	}
}

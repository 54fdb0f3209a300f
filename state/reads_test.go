package state_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReadsStayInTheNamespace reads through a State's own requests, over
// the in-process client and over the socket, with keys just outside its
// namespace on either side: a listing of everything, of a prefix paged
// at one revision, and single keys see the namespace's keys alone, without
// its prefix.
func TestReadsStayInTheNamespace(t *testing.T) {
	ctx := etcdtest.Context(t)
	ns := etcdtest.Namespace(t) // "/t/<name>/<n>/"
	raw := etcdtest.Client(t)
	outside := []string{ns[:len(ns)-1], ns[:len(ns)-1] + "0", ns[:len(ns)-1] + ".x", prefixEndOf(ns) + "x"}
	for _, k := range outside {
		if _, err := raw.Put(ctx, k, "outside"); err != nil {
			t.Fatal(err)
		}
	}
	var inside []string
	for i := range 2500 {
		inside = append(inside, fmt.Sprintf("%sunits/u/%04d", ns, i))
	}
	inside = append(inside, ns+"a", ns+"\xff")
	for lo := 0; lo < len(inside); lo += 100 {
		var ops []clientv3.Op
		for _, k := range inside[lo:min(lo+100, len(inside))] {
			ops = append(ops, clientv3.OpPut(k, "in"))
		}
		if _, err := raw.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, k := range inside {
		want = append(want, k[len(ns):])
	}
	slices.Sort(want)

	socket, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{etcdtest.Server(t).Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer socket.Close()
	for name, c := range map[string]*clientv3.Client{"in process": raw, "socket": socket} {
		t.Run(name, func(t *testing.T) {
			st, err := state.New(c, state.Config{Namespace: ns})
			must(t, "New", err)
			all, _, err := st.List(ctx, "")
			must(t, "List", err)
			if got := eventKeys(all); !slices.Equal(got, want) {
				t.Errorf("List of everything: %d keys (%q…), want %d", len(got), got[:min(3, len(got))], len(want))
			}
			lists, _, err := st.ListMany(ctx, []state.ListSpec{{Key: "units/u/", Prefix: true}, {Key: "a"}, {Key: "units/u/0007"}, {Key: "b"}})
			must(t, "ListMany", err)
			if got := eventKeys(lists[0]); len(got) != 2500 || got[0] != "units/u/0000" || got[2499] != "units/u/2499" {
				t.Errorf("ListMany of a prefix: %d keys, want units/u/0000…2499", len(got))
			}
			for i, w := range [][]string{1: {"a"}, 2: {"units/u/0007"}, 3: nil} {
				if i > 0 && !slices.Equal(eventKeys(lists[i]), w) {
					t.Errorf("ListMany of one key: %q, want %q", eventKeys(lists[i]), w)
				}
			}
		})
	}
}

func eventKeys(evs []state.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Key)
	}
	return out
}

// prefixEndOf is the first key after every key with the prefix.
func prefixEndOf(prefix string) string {
	b := []byte(prefix)
	b[len(b)-1]++
	return string(b)
}

// A State whose Config.AtLeast names a revision not yet visible reads
// again until it is, and then finds what was written at it: a unit an
// agent was handed by the watch hub is there when the agent asks.
func TestReadAtLeast(t *testing.T) {
	ctx, raw, ns := etcdtest.Context(t), etcdtest.Client(t), etcdtest.Namespace(t)
	now, err := raw.Get(ctx, "absent")
	if err != nil {
		t.Fatal(err)
	}
	need := now.Header.Revision + 1 // the put below
	st, err := state.New(raw, state.Config{Namespace: ns, AtLeast: func() int64 { return need }})
	if err != nil {
		t.Fatal(err)
	}
	u := &pb.Unit{Name: "app/0", Service: "app", Life: pb.Life_LIFE_ALIVE}
	data, err := proto.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		time.Sleep(20 * time.Millisecond)
		if _, err := raw.Put(ctx, ns+state.UnitKey("app/0"), string(data)); err != nil {
			t.Error(err)
		}
	}()
	found, err := st.UnitsNamed(ctx, "app/0")
	if err != nil {
		t.Fatal(err)
	}
	if found[0] == nil || found[0].Name != "app/0" {
		t.Errorf("UnitsNamed = %v, want app/0", found)
	}
	if st.Stats().ReadsAgain == 0 {
		t.Error("no read was read again")
	}
}

// A revision the store never reaches (etcd restored from an older backup
// under a running controller) holds a read up only so long: it is read
// again maxReadsAgain times, then stands.
func TestReadAtLeastGivesUp(t *testing.T) {
	ctx, raw, ns := etcdtest.Context(t), etcdtest.Client(t), etcdtest.Namespace(t)
	st, err := state.New(raw, state.Config{Namespace: ns, AtLeast: func() int64 { return 1 << 62 }})
	if err != nil {
		t.Fatal(err)
	}
	found, err := st.UnitsNamed(ctx, "app/0")
	if err != nil || found[0] != nil {
		t.Fatalf("UnitsNamed = %v, %v; want no unit", found, err)
	}
	if n := st.Stats().ReadsAgain; n != 10 {
		t.Errorf("read again %d times, want 10", n)
	}
}

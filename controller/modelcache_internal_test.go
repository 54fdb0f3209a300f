package controller

import (
	"context"
	"crypto/tls"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A whole-model status whose model cache cannot catch up reads etcd
// after its wait, and shows what was written all the same.
func TestStatusFallsBackWhenTheCacheIsBehind(t *testing.T) {
	ctx, st, src, s := cachedServer(t)
	status := func() *pb.ModelStatus { t.Helper(); return wholeStatus(t, ctx, s) }
	poll.Until(t, "the model cache ready", func() bool {
		status()
		return s.ModelCacheStats().Ready
	})
	src.Hold(true)
	ms, err := st.AddMachines(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := status()
	if !slices.ContainsFunc(got.Machines, func(m *pb.MachineStatus) bool { return m.Id == ms[0].Id }) {
		t.Fatalf("status with the cache held back = %d machines, not machine %s: want the machine added", len(got.Machines), ms[0].Id)
	}
	if stats := s.ModelCacheStats(); stats.Behind == 0 {
		t.Errorf("ModelCacheStats() = %+v: want a call that found the cache behind", stats)
	}
	src.Hold(false)
	served := s.ModelCacheStats().Served
	if got := status(); !slices.ContainsFunc(got.Machines, func(m *pb.MachineStatus) bool { return m.Id == ms[0].Id }) {
		t.Fatalf("status with the changes let through = %d machines, not machine %s", len(got.Machines), ms[0].Id)
	}
	if got := s.ModelCacheStats().Served; got <= served {
		t.Errorf("the model cache served %d statuses, as before: want the last from it", got)
	}
}

// cachedServer returns a controller (not serving) whose watch hub follows
// st through a gate that can hold its changes back, both running until
// the test ends.
func cachedServer(t *testing.T) (context.Context, *state.State, *statetest.HeldChanges, *Server) {
	t.Helper()
	ctx := etcdtest.Context(t)
	var hub *watchhub.Hub
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t), AtLeast: func() int64 { return hub.Revision() }})
	if err != nil {
		t.Fatal(err)
	}
	src := statetest.NewHeldChanges(st)
	if hub, err = watchhub.New(watchhub.Config{Source: src, MarkKey: state.BarrierKey}); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{State: st, Watches: hub, TLS: &tls.Config{}, ModelCacheWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { hub.Run(rctx) })
	wg.Go(func() { s.Run(rctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ctx, st, src, s
}

// wholeStatus asks s for the whole model's status.
func wholeStatus(t *testing.T, ctx context.Context, s *Server) *pb.ModelStatus {
	t.Helper()
	resp, err := s.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status
}

// The status of the model the cache keeps is built once while the model
// does not change, is what building it afresh gives, and changes with the
// model; one that counts down to a forced removal is built every time.
func TestWholeStatusBuiltOncePerModel(t *testing.T) {
	ctx, st, _, s := cachedServer(t)
	if _, err := st.AddService(ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddUnits(ctx, "kv", 2, state.Placement{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the model cache ready", func() bool {
		wholeStatus(t, ctx, s)
		return s.ModelCacheStats().Ready
	})
	fresh := func() *pb.ModelStatus {
		t.Helper()
		m, err := st.Model(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := buildStatus(m, time.Now())
		if err := s.addControllers(ctx, want); err != nil {
			t.Fatal(err)
		}
		return want
	}
	first, again := wholeStatus(t, ctx, s), wholeStatus(t, ctx, s)
	if first.Services[0] != again.Services[0] {
		t.Errorf("two statuses of the same model built its services twice: want them built once")
	}
	if want := fresh(); !proto.Equal(again, want) {
		t.Fatalf("status of the kept model differs from one built afresh:\n got %v\nwant %v", again, want)
	}
	// A write outside the model moves the revision the status shows,
	// not what it is built of.
	if _, err := etcdtest.Client(t).Put(ctx, "elsewhere/"+t.Name(), "x"); err != nil {
		t.Fatal(err)
	}
	later := wholeStatus(t, ctx, s)
	if later.Revision <= again.Revision || later.Services[0] != again.Services[0] {
		t.Errorf("status after a write elsewhere at revision %d (before %d), built again: %v; want a later revision, the same build",
			later.Revision, again.Revision, later.Services[0] != again.Services[0])
	}
	if want := fresh(); !proto.Equal(later, want) {
		t.Fatalf("status after a write elsewhere differs from one built afresh:\n got %v\nwant %v", later, want)
	}

	if err := st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{Force: true, MaxWait: time.Hour}); err != nil {
		t.Fatal(err)
	}
	changed := wholeStatus(t, ctx, s)
	if want := fresh(); !proto.Equal(changed, want) {
		t.Fatalf("status after a unit was destroyed differs from one built afresh:\n got %v\nwant %v", changed, want)
	}
	if !slices.ContainsFunc(changed.Services[0].Units[0].WaitingFor, func(w string) bool { return strings.HasPrefix(w, "forced removal in ") }) {
		t.Fatalf("kv/0 waits for %q: want a forced removal counted down", changed.Services[0].Units[0].WaitingFor)
	}
	if again := wholeStatus(t, ctx, s); again.Services[0] == changed.Services[0] {
		t.Errorf("a status counting down to a forced removal was kept: want it built at every call")
	}
}

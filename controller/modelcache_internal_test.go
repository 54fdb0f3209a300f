package controller

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"testing"
	"time"

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
	defer func() { cancel(); wg.Wait() }()

	status := func() *pb.ModelStatus {
		t.Helper()
		resp, err := s.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
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

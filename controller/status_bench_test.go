package controller_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/cputime"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// BenchmarkStatus times the Status RPC over TLS, as ctl status calls it,
// for a model as the scale harness leaves it running: N units of kv on
// 1,000 machines, each in scope of its relation to app's one unit, with
// its agent's and its workload's status reported. The model is written
// straight to state (no agents), which takes a minute at 100,000 units.
//
// It times the path a status of a steady model takes: answered from the
// decoded model the controller keeps (modelcache), warm (the first call
// starts it, and the loop begins once it has listed the model), each call
// reading etcd's revision and no more of etcd. The first call, which
// reads the model from etcd, is logged apart.
//
//	go test -run '^$' -bench 'Status/units=100000' -benchtime 5x ./controller
func BenchmarkStatus(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("units=%d", n), func(b *testing.B) {
			ce := controllertest.New(b, controllertest.Options{Anonymous: true})
			loadModel(b, ce.Ctx, ce.State, n, 1000)
			op := ce.Operator()
			status := func() int {
				resp, err := op.Status(ce.Ctx, &pb.StatusRequest{})
				if err != nil {
					b.Fatal(err)
				}
				size := 0
				for _, svc := range resp.Status.Services {
					size += len(svc.Units)
				}
				return size
			}
			start := time.Now()
			status()
			b.Logf("first status, read from etcd while the model cache starts: %s", time.Since(start).Round(time.Millisecond))
			start = time.Now()
			for !ce.Server().ModelCacheStats().Ready {
				if time.Since(start) > time.Minute {
					b.Fatal("the model cache did not list the model within a minute")
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.Logf("the model cache listed the model in %s; timing statuses from it", time.Since(start).Round(time.Millisecond))
			served := ce.Server().ModelCacheStats().Served
			var size int
			b.ResetTimer()
			// CPU time as well as wall time (etcd runs in this process):
			// on a loaded machine the wall time counts waits for a core.
			cpu0 := cputime.Process()
			for b.Loop() {
				size = status()
			}
			b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.StopTimer()
			if size < n {
				b.Fatalf("status has %d units, want %d at least", size, n)
			}
			if got := ce.Server().ModelCacheStats().Served - served; got < int64(b.N) {
				b.Fatalf("the model cache served %d of %d statuses: the others read etcd", got, b.N)
			}
		})
	}
}

// loadModel writes n units of kv on machines machines, related to app's
// one unit, every unit in scope and reported idle and active.
func loadModel(b *testing.B, ctx context.Context, st *state.State, n, machines int) {
	b.Helper()
	start := time.Now()
	eps := map[string][]*pb.Endpoint{
		"kv":  {{Name: "server", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}},
		"app": {{Name: "db", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL}},
	}
	for _, name := range []string{"kv", "app"} {
		if _, err := st.AddService(ctx, state.AddServiceArgs{Name: name, Charm: &pb.CharmRef{Name: name, Revision: 1}, Endpoints: eps[name]}); err != nil {
			b.Fatal(err)
		}
	}
	ms, err := st.AddMachines(ctx, machines)
	if err != nil {
		b.Fatal(err)
	}
	var units []string
	var mu sync.Mutex
	parallel(b, len(ms), func(i int) error {
		us, err := st.AddUnits(ctx, "kv", n/machines, state.Placement{Machine: ms[i].Id})
		mu.Lock()
		defer mu.Unlock()
		for _, u := range us {
			units = append(units, u.Name)
		}
		return err
	})
	app, err := st.AddUnits(ctx, "app", 1, state.Placement{})
	if err != nil {
		b.Fatal(err)
	}
	units = append(units, app[0].Name)
	rel, err := st.AddRelation(ctx, state.EndpointSpec{Service: "kv", Endpoint: "server"}, state.EndpointSpec{Service: "app", Endpoint: "db"})
	if err != nil {
		b.Fatal(err)
	}
	parallel(b, len(units), func(i int) error {
		return st.EnterScope(ctx, rel.Id, units[i], map[string]string{"address": "10.0.0." + strconv.Itoa(i%250)})
	})
	const batch = 500
	for _, kind := range []state.StatusKind{state.StatusUnitAgent, state.StatusUnit} {
		parallel(b, (len(units)+batch-1)/batch, func(i int) error {
			var reports []state.UnitStatus
			for _, u := range units[i*batch : min((i+1)*batch, len(units))] {
				s := &pb.Status{Status: "idle"}
				if kind == state.StatusUnit {
					s = &pb.Status{Status: "active", Message: "serving on 10.0.0.1:8080"}
				}
				reports = append(reports, state.UnitStatus{Kind: kind, Unit: u, Status: s})
			}
			errs, err := st.SetUnitStatuses(ctx, reports)
			for _, e := range errs {
				if e != nil {
					return e
				}
			}
			return err
		})
	}
	b.Logf("wrote %d units on %d machines in %s", len(units), machines, time.Since(start).Round(time.Millisecond))
}

// parallel runs f(0..n-1) on 8 goroutines, failing b at the first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

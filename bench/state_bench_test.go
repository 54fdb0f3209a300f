package bench_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Benchmarks run against a member that syncs to disk, as production does.
func TestMain(m *testing.M) { etcdtest.MainWith(m, etcdtest.Options{Fsync: true}) }

// clients is how many goroutines call concurrently in every benchmark, the
// state operations and the raw transactions alike. RunParallel runs
// b.SetParallelism × GOMAXPROCS goroutines, so the figure is exact when
// GOMAXPROCS divides it (16 on a 2-core machine, 8 × 2), and GOMAXPROCS
// when that is larger. It is a property of the workload, not the machine:
// AddUnits callers conflict on the machine sequence, and 64 of them have
// been seen to run out of retries (state.ErrAborted).
const clients = 16

// machines is how many alive machines the benchmarks that need machines
// spread their units over.
const machines = 4

// batch is BenchmarkAddUnitsBatch's units per AddUnits call: the most that
// AddUnits puts in one transaction.
const batch = 14

// rawValue is what BenchmarkRawPutIfAbsent writes: 100 bytes.
var rawValue = strings.Repeat("v", 100)

// settings are the initial relation settings of BenchmarkEnterScope's
// units: 100 bytes of keys and values.
var settings = map[string]string{
	"private-address": "10.20.30.40",
	"hostname":        "machine-1234.lan",
	"port":            "5432",
	"database":        "application",
	"password":        "s3cr3t-p4ssw0rd",
}

// Charms' endpoints: app requires what kv provides.
var (
	appEndpoints = []*pb.Endpoint{
		{Name: "db", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "website", Interface: "http", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
	}
	kvEndpoints = []*pb.Endpoint{
		{Name: "server", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "cluster", Interface: "kv-peers", Role: pb.Role_ROLE_PEER, Scope: pb.Scope_SCOPE_GLOBAL},
	}
)

// BenchmarkAddUnit adds one principal unit on a new machine per op: one
// AddUnits(n=1) call, one read and one transaction when nothing conflicts.
// Every call bumps the service's unit sequence and the machine sequence, so
// concurrent calls conflict on them and retry (conflicts/op).
func BenchmarkAddUnit(b *testing.B) {
	st, ctx := newState(b)
	addService(b, ctx, st, "app", appEndpoints)
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, _ int) error {
		_, err := st.AddUnits(ctx, "app", 1, state.Placement{})
		return err
	})
}

// BenchmarkAddUnitsBatch adds 14 principal units, each on a new machine, per
// op: one AddUnits call, one transaction. Its unit figures are per unit.
func BenchmarkAddUnitsBatch(b *testing.B) {
	st, ctx := newState(b)
	addService(b, ctx, st, "app", appEndpoints)
	run(b, ctx, batch, stateCounts(st), func(ctx context.Context, _ int) error {
		_, err := st.AddUnits(ctx, "app", batch, state.Placement{})
		return err
	})
}

// BenchmarkAssignUnit assigns one pre-made unassigned unit per op to one of
// a few alive machines.
func BenchmarkAssignUnit(b *testing.B) {
	st, ctx := newState(b)
	addService(b, ctx, st, "app", appEndpoints)
	ms := addMachines(b, ctx, st, machines)
	us, err := st.AddUnits(ctx, "app", b.N, state.Placement{Unassigned: true})
	if err != nil {
		b.Fatalf("AddUnits(app, %d, unassigned): %v", b.N, err)
	}
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, i int) error {
		return st.AssignUnit(ctx, us[i].Name, ms[i%len(ms)])
	})
}

// BenchmarkEnterScope puts one pre-made unit per op into a pre-made
// relation's scope, with 100 bytes of initial settings.
func BenchmarkEnterScope(b *testing.B) {
	st, ctx, rel, units := relatedUnits(b)
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, i int) error {
		return st.EnterScope(ctx, rel.Id, units[i], settings)
	})
}

// relatedUnits makes services app and kv, the relation app:db kv:server,
// and b.N assigned units of app.
func relatedUnits(b *testing.B) (*state.State, context.Context, *pb.Relation, []string) {
	b.Helper()
	st, ctx := newState(b)
	addService(b, ctx, st, "app", appEndpoints)
	addService(b, ctx, st, "kv", kvEndpoints)
	rel, err := st.AddRelation(ctx, state.EndpointSpec{Service: "app", Endpoint: "db"}, state.EndpointSpec{Service: "kv", Endpoint: "server"})
	if err != nil {
		b.Fatalf("AddRelation(app:db, kv:server): %v", err)
	}
	return st, ctx, rel, assignedUnits(b, ctx, st, "app", b.N)
}

// BenchmarkLeaveDyingScope takes one unit per op out of a dying
// relation's scope that held all b.N of them, side by side as a destroyed
// service's units leave: each LeaveScope reads the unit's neighbours in
// the scope to find a witness that the scope stays occupied (the relation
// is not removed with it), and the last removes the relation. The
// witness reads are a destroy's largest share of the controller's reads.
func BenchmarkLeaveDyingScope(b *testing.B) {
	st, ctx, rel, units := relatedUnits(b)
	for _, u := range units {
		if err := st.EnterScope(ctx, rel.Id, u, settings); err != nil {
			b.Fatalf("EnterScope(%s): %v", u, err)
		}
	}
	if err := st.DestroyRelation(ctx, rel.Id); err != nil {
		b.Fatalf("DestroyRelation: %v", err)
	}
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, i int) error {
		return st.LeaveScope(ctx, rel.Id, units[i])
	})
}

// BenchmarkLeaveThenDie and BenchmarkDieLeaving take one destroyed unit
// per op out of a dying relation's scope that held all b.N of them, and
// set it dead: the first with LeaveScope then EnsureUnitDead, the second
// with one EnsureUnitDead naming the scope, as a dying unit's agent with
// no hook in between asks it. Both make two transactions; the second
// reads once where the first reads twice (reads/op).
func BenchmarkLeaveThenDie(b *testing.B) {
	st, ctx, rel, units := dyingScope(b)
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, i int) error {
		if err := st.LeaveScope(ctx, rel.Id, units[i]); err != nil {
			return err
		}
		return st.EnsureUnitDead(ctx, units[i])
	})
}

func BenchmarkDieLeaving(b *testing.B) {
	st, ctx, rel, units := dyingScope(b)
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, i int) error {
		return st.EnsureUnitDead(ctx, units[i], rel.Id)
	})
}

// dyingScope is relatedUnits with every unit in the relation's scope,
// then destroyed, and the relation destroyed.
func dyingScope(b *testing.B) (*state.State, context.Context, *pb.Relation, []string) {
	b.Helper()
	st, ctx, rel, units := relatedUnits(b)
	for _, u := range units {
		if err := st.EnterScope(ctx, rel.Id, u, settings); err != nil {
			b.Fatalf("EnterScope(%s): %v", u, err)
		}
		if err := st.DestroyUnit(ctx, u, state.DestroyOptions{}); err != nil {
			b.Fatalf("DestroyUnit(%s): %v", u, err)
		}
	}
	if err := st.DestroyRelation(ctx, rel.Id); err != nil {
		b.Fatalf("DestroyRelation: %v", err)
	}
	return st, ctx, rel, units
}

// BenchmarkDestroyToRemoved takes one pre-made assigned unit per op from
// alive to removed, as the controller and the agents do: DestroyUnit,
// EnsureUnitDead, RemoveUnit, three transactions.
func BenchmarkDestroyToRemoved(b *testing.B) {
	st, ctx := newState(b)
	addService(b, ctx, st, "app", appEndpoints)
	units := assignedUnits(b, ctx, st, "app", b.N)
	run(b, ctx, 1, stateCounts(st), func(ctx context.Context, i int) error {
		u := units[i]
		if err := st.DestroyUnit(ctx, u, state.DestroyOptions{}); err != nil {
			return err
		}
		if err := st.EnsureUnitDead(ctx, u); err != nil {
			return err
		}
		return st.RemoveUnit(ctx, u)
	})
}

// BenchmarkRawPutIfAbsent is the yardstick: per op, one etcd transaction
// that puts a 100-byte value under a new key if the key is absent, through
// a namespaced client as the state package uses.
func BenchmarkRawPutIfAbsent(b *testing.B) {
	kv := namespace.NewKV(etcdtest.Client(b).KV, etcdtest.Namespace(b))
	ctx := benchContext(b)
	var txns, conflicts atomic.Int64
	count := func() counts { return counts{txns: txns.Load(), conflicts: conflicts.Load()} }
	run(b, ctx, 1, count, func(ctx context.Context, i int) error {
		key := "raw/" + strconv.Itoa(i)
		resp, err := kv.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, rawValue)).
			Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			conflicts.Add(1)
			return fmt.Errorf("put %s if absent: it exists", key)
		}
		txns.Add(1)
		return nil
	})
}

// counts are the running totals a benchmark reports per op.
type counts struct{ txns, reads, conflicts int64 }

func stateCounts(st *state.State) func() counts {
	return func() counts {
		s := st.Stats()
		return counts{txns: s.Txns, reads: s.Reads, conflicts: s.Conflicts}
	}
}

// run times b.N calls of op, i running from 0 to b.N-1, from the clients'
// goroutines, and reports op/s, the process's CPU time and the counts per
// op; when each op handles several units, the figures per unit too. It fails
// the benchmark with the first error.
func run(b *testing.B, ctx context.Context, units int, count func() counts, op func(ctx context.Context, i int) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	before := count()
	cpuBefore := cpuTime(b)
	b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			if failed.Load() != nil {
				continue // drain: b.Fatal belongs to the benchmark's goroutine
			}
			i := int(next.Add(1) - 1)
			if err := op(ctx, i); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}
	})
	b.StopTimer()
	cpu := cpuTime(b) - cpuBefore
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	after := count()
	n, secs := float64(b.N), b.Elapsed().Seconds()
	b.ReportMetric(n/secs, "op/s")
	// The process holds etcd as well as its clients: CPU time per op times
	// op/s near the machine's cores means the figures are CPU-bound.
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/op")
	b.ReportMetric(float64(after.txns-before.txns)/n, "txns/op")
	b.ReportMetric(float64(after.reads-before.reads)/n, "reads/op")
	b.ReportMetric(float64(after.conflicts-before.conflicts)/n, "conflicts/op")
	if units > 1 {
		u := n * float64(units)
		b.ReportMetric(secs*1e9/u, "ns/unit")
		b.ReportMetric(u/secs, "unit/s")
		b.ReportMetric(float64(after.txns-before.txns)/u, "txns/unit")
	}
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newState returns a State in a namespace of its own, and a context.
func newState(b *testing.B) (*state.State, context.Context) {
	b.Helper()
	st, err := state.New(etcdtest.Client(b), state.Config{Namespace: etcdtest.Namespace(b)})
	if err != nil {
		b.Fatal(err)
	}
	return st, benchContext(b)
}

// benchContext returns a context that ends with the benchmark run, or after
// ten minutes should a run hang.
func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

func addService(b *testing.B, ctx context.Context, st *state.State, name string, eps []*pb.Endpoint) {
	b.Helper()
	_, err := st.AddService(ctx, state.AddServiceArgs{Name: name, Charm: &pb.CharmRef{Name: name, Revision: 1}, Endpoints: eps})
	if err != nil {
		b.Fatalf("AddService(%s): %v", name, err)
	}
}

func addMachines(b *testing.B, ctx context.Context, st *state.State, n int) []string {
	b.Helper()
	ms, err := st.AddMachines(ctx, n)
	if err != nil {
		b.Fatalf("AddMachines(%d): %v", n, err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.Id
	}
	return ids
}

// assignedUnits adds n units of the service, spread over a few new
// machines, and returns their names.
func assignedUnits(b *testing.B, ctx context.Context, st *state.State, service string, n int) []string {
	b.Helper()
	ms := addMachines(b, ctx, st, machines)
	var names []string
	for i, m := range ms {
		k := n/len(ms) + min(1, max(0, n%len(ms)-i))
		if k == 0 {
			continue
		}
		us, err := st.AddUnits(ctx, service, k, state.Placement{Machine: m})
		if err != nil {
			b.Fatalf("AddUnits(%s, %d, machine %s): %v", service, k, m, err)
		}
		for _, u := range us {
			names = append(names, u.Name)
		}
	}
	if len(names) != n {
		b.Fatalf("assignedUnits made %d units, want %d", len(names), n)
	}
	return names
}

package modelcache_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/lifelinehq/lifeline/controller/modelcache"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

var (
	seedFlag  = flag.Uint64("seed", 0, "seed of TestRandomized (0: from the clock)")
	stepsFlag = flag.Int("random-steps", 300, "steps of TestRandomized")
)

// fixture is a cache following a hub of its own over a namespace of its
// own. The hub's source is the State behind a gate, which holds the
// changes back while shut.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	st    *state.State
	gate  *statetest.HeldChanges
	hub   *watchhub.Hub
	cache *modelcache.Cache
}

func newFixture(t *testing.T, hcfg watchhub.Config, cfg modelcache.Config) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: etcdtest.Context(t)}
	var err error
	f.st, err = state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t), AtLeast: func() int64 {
		if h := f.hub; h != nil {
			return h.Revision()
		}
		return 0
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.st.BootstrapAdmin(f.ctx, ""); err != nil {
		t.Fatal(err)
	}
	f.gate = statetest.NewHeldChanges(f.st)
	hcfg.Source, hcfg.MarkKey = f.gate, state.BarrierKey
	hub, err := watchhub.New(hcfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Hub, cfg.Progress = hub, f.st.RequestProgress
	if f.cache, err = modelcache.New(cfg); err != nil {
		t.Fatal(err)
	}
	f.hub = hub
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { hub.Run(ctx) })
	wg.Go(func() { f.cache.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f
}

// cached returns the cache's model at rev or later, starting the cache if
// need be.
func (f *fixture) cached(rev int64) *state.Model {
	f.t.Helper()
	var m *state.Model
	poll.UntilSays(f.t, fmt.Sprintf("the cache at revision %d", rev), func() (bool, string) {
		var err error
		m, err = f.cache.Model(f.ctx, rev)
		// Not running: Run has not started yet.
		if err != nil && !errors.Is(err, modelcache.ErrStarting) && !errors.Is(err, modelcache.ErrNotRunning) {
			f.t.Fatalf("Model(%d) = %v", rev, err)
		}
		return err == nil, fmt.Sprint(err)
	})
	return m
}

// same checks that the cache's model at the current revision is what
// state.Model reads, and returns it. Nothing else writes meanwhile.
func (f *fixture) same(what string) *state.Model {
	f.t.Helper()
	want, err := f.st.Model(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	got := f.cached(want.Revision)
	if got.Revision != want.Revision {
		f.t.Fatalf("%s: the cache's model is at revision %d, want %d", what, got.Revision, want.Revision)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		f.t.Fatalf("%s: the cache's model differs from state.Model's at revision %d (-want +got):\n%s", what, want.Revision, diff)
	}
	return want
}

// TestRandomized mutates a model through state's operations and checks,
// after each step, that the cache's model is state.Model's at the same
// revision.
func TestRandomized(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s failed with -seed=%d", t.Name(), seed)
		}
	})
	// A small queue: a change of many keys resets the stream, which
	// lists again.
	f := newFixture(t, watchhub.Config{QueueEvents: 32}, modelcache.Config{})
	w := &walker{f: f, rng: rand.New(rand.NewPCG(seed, 53)), present: map[string]*state.Presence{}}
	m := f.same("empty")
	for i := range *stepsFlag {
		what := w.step(m)
		m = f.same(fmt.Sprintf("step %d (%s)", i, what))
	}
	for _, p := range w.present {
		p.Close()
	}
	f.same("presence gone")
	if s := f.cache.Stats(); s.Starts != 1 || s.Failures != 0 {
		t.Errorf("Stats() = %+v: want one start, no failure", s)
	}
}

// walker makes random changes through state's operations, most of them
// allowed by the rules given the model before.
type walker struct {
	f       *fixture
	rng     *rand.Rand
	present map[string]*state.Presence
}

func (w *walker) step(m *state.Model) string {
	ctx, st, rng := w.f.ctx, w.f.st, w.rng
	pickUnit := func() *pb.Unit {
		if len(m.Units) == 0 {
			return nil
		}
		return m.Units[rng.IntN(len(m.Units))]
	}
	pickService := func() *pb.Service {
		if len(m.Services) == 0 {
			return nil
		}
		// Mostly an alive one: the rules refuse most changes to others.
		for range 3 {
			if svc := m.Services[rng.IntN(len(m.Services))]; svc.Life == pb.Life_LIFE_ALIVE {
				return svc
			}
		}
		return m.Services[rng.IntN(len(m.Services))]
	}
	pickMachine := func() *pb.Machine {
		if len(m.Machines) == 0 {
			return nil
		}
		return m.Machines[rng.IntN(len(m.Machines))]
	}
	pickRelation := func() *pb.Relation {
		if len(m.Relations) == 0 {
			return nil
		}
		return m.Relations[rng.IntN(len(m.Relations))]
	}
	eps := []*pb.Endpoint{
		{Name: "db", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "app", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "peers", Interface: "peers", Role: pb.Role_ROLE_PEER, Scope: pb.Scope_SCOPE_GLOBAL},
	}
	var what string
	var err error
	switch op := rng.IntN(20); {
	case op < 2 || len(m.Services) == 0:
		what = "deploy"
		name := fmt.Sprintf("s%d", rng.IntN(8)+8*(len(m.Services)/6))
		_, err = st.AddService(ctx, state.AddServiceArgs{Name: name, Charm: &pb.CharmRef{Name: name, Revision: 1}, Endpoints: eps})
	case op < 3 || len(m.Machines) == 0:
		what = "add machines"
		_, err = st.AddMachines(ctx, 1+rng.IntN(3))
	case op < 6:
		what = "add units"
		svc, mach := pickService(), pickMachine()
		p := state.Placement{}
		if rng.IntN(2) == 0 {
			p.Machine = mach.Id
		}
		_, err = st.AddUnits(ctx, svc.Name, 1+rng.IntN(4), p)
	case op < 7:
		what = "relate"
		a, b := pickService(), pickService()
		_, err = st.AddRelation(ctx, state.EndpointSpec{Service: a.Name, Endpoint: "db"}, state.EndpointSpec{Service: b.Name, Endpoint: "app"})
	case op < 9:
		what = "enter scope"
		if rel := pickRelation(); rel != nil {
			var units []string
			for _, u := range m.Units {
				if u.Service == rel.Endpoints[0].Service || u.Service == rel.Endpoints[len(rel.Endpoints)-1].Service {
					units = append(units, u.Name)
				}
			}
			if len(units) > 0 {
				err = st.EnterScope(ctx, rel.Id, units[rng.IntN(len(units))], map[string]string{"n": fmt.Sprint(rng.IntN(9))})
			}
		}
	case op < 10:
		what = "leave scope"
		if rel := pickRelation(); rel != nil && len(m.Scopes[rel.Id]) > 0 {
			units := m.Scopes[rel.Id]
			err = st.LeaveScope(ctx, rel.Id, units[rng.IntN(len(units))])
		}
	case op < 12:
		what = "statuses"
		var reports []state.UnitStatus
		reported := map[string]bool{}
		for range 1 + rng.IntN(40) {
			if u := pickUnit(); u != nil && !reported[u.Name] {
				reported[u.Name] = true
				kind := []state.StatusKind{state.StatusUnit, state.StatusUnitAgent}[rng.IntN(2)]
				reports = append(reports, state.UnitStatus{Kind: kind, Unit: u.Name, Status: &pb.Status{Status: []string{"active", "idle", "blocked"}[rng.IntN(3)], Message: fmt.Sprint(rng.IntN(100))}})
			}
		}
		if len(reports) > 0 {
			_, err = st.SetUnitStatuses(ctx, reports)
		}
		if mach := pickMachine(); err == nil && mach != nil {
			err = st.SetStatus(ctx, state.StatusMachine, mach.Id, &pb.Status{Status: "started"})
		}
	case op < 13:
		what = "destroy unit"
		if u := pickUnit(); u != nil {
			err = st.DestroyUnit(ctx, u.Name, state.DestroyOptions{Force: rng.IntN(2) == 0, MaxWait: time.Hour})
		}
	case op < 14:
		what = "remove unit"
		if u := pickUnit(); u != nil {
			if err = st.EnsureUnitDead(ctx, u.Name); err == nil {
				err = st.RemoveUnit(ctx, u.Name)
			}
		}
	case op < 15:
		what = "destroy relation or service"
		if rng.IntN(2) == 0 {
			if rel := pickRelation(); rel != nil {
				err = st.DestroyRelation(ctx, rel.Id)
			}
		} else if svc := pickService(); svc != nil {
			err = st.DestroyService(ctx, svc.Name)
		}
	case op < 16:
		what = "destroy machine"
		if mach := pickMachine(); mach != nil {
			err = st.DestroyMachine(ctx, mach.Id, state.DestroyOptions{Force: rng.IntN(2) == 0, MaxWait: time.Hour})
			if err == nil {
				if err = st.EnsureMachineDead(ctx, mach.Id); err == nil {
					err = st.RemoveMachine(ctx, mach.Id)
				}
			}
		}
	case op < 17:
		what = "presence"
		mach := pickMachine()
		tag := "machine-" + mach.Id
		if p := w.present[tag]; p != nil {
			p.Close()
			delete(w.present, tag)
			break
		}
		var p *state.Presence
		if p, err = st.Present(ctx, tag, time.Minute); err == nil {
			w.present[tag] = p
		}
	case op < 18:
		what = "leader"
		var units []string
		for _, u := range m.Units {
			if u.Life == pb.Life_LIFE_ALIVE && w.present["machine-"+u.MachineId] != nil {
				units = append(units, u.Name)
			}
		}
		if len(units) > 0 {
			err = st.ElectLeader(ctx, units[rng.IntN(len(units))])
		}
	case op < 19:
		what = "host report"
		if u := pickUnit(); u != nil {
			var ports []string
			for range rng.IntN(3) {
				ports = append(ports, fmt.Sprintf("%d/tcp", 8000+rng.IntN(4)))
			}
			err = st.SetHostReport(ctx, u.Name, &pb.HostReport{Claims: &pb.HostClaimsReport{OpenedPorts: ports}})
		}
	default:
		what = "config, revisions and ownership"
		svc := pickService()
		if rng.IntN(2) == 0 {
			_, err = st.ChangeSpec(ctx, svc.Name, state.SpecChange{Reason: "config", SkipCanary: true, Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
				return &pb.ServiceSpec{Charm: head.GetSpec().GetCharm(), Config: map[string]*pb.ConfigValue{
					"n": {Value: &pb.ConfigValue_IntValue{IntValue: rng.Int64()}},
				}}, nil, nil
			}})
			for _, u := range m.Units {
				if err == nil && u.Service == svc.Name && rng.IntN(2) == 0 {
					if ur := m.UnitRevisions[u.Name]; ur != nil {
						_ = st.SetUnitRevision(ctx, u.Name, ur.Target)
					}
				}
			}
		} else {
			ents := []*pb.OwnedEntity{{Kind: state.OwnService, Id: svc.Name, Resource: svc.Name}}
			if mach := pickMachine(); mach != nil {
				ents = append(ents, &pb.OwnedEntity{Kind: state.OwnMachine, Id: mach.Id, Resource: "machines"})
			}
			err = st.ClaimOwnership(ctx, fmt.Sprintf("m%d", rng.IntN(2)), "admin", ents)
		}
	}
	if err != nil {
		// Refused by the rules, most likely: the model is whatever it
		// is, and the cache must show it all the same.
		what += ": " + err.Error()
	}
	if ctx.Err() != nil {
		w.f.t.Fatal(ctx.Err())
	}
	return what
}

// A stream that falls behind lists again, and the cache applies its
// listing in place of what it held of its prefix.
func TestStreamListsAgain(t *testing.T) {
	f := newFixture(t, watchhub.Config{QueueEvents: 4}, modelcache.Config{})
	if _, err := f.st.AddService(f.ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}}); err != nil {
		t.Fatal(err)
	}
	units, err := f.st.AddUnits(f.ctx, "kv", 20, state.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	f.same("20 units")
	for _, status := range []string{"active", "blocked"} {
		var reports []state.UnitStatus
		for _, u := range units {
			reports = append(reports, state.UnitStatus{Kind: state.StatusUnit, Unit: u.Name, Status: &pb.Status{Status: status}})
		}
		if errs, err := f.st.SetUnitStatuses(f.ctx, reports); err != nil || errors.Join(errs...) != nil {
			t.Fatalf("SetUnitStatuses = %v, %v", errs, err)
		}
		m := f.same("20 statuses " + status)
		if got := m.Status(state.StatusUnit, units[19].Name).GetStatus(); got != status {
			t.Fatalf("status of %s = %q, want %q", units[19].Name, got, status)
		}
	}
	if s := f.hub.Stats(); s.Overflows == 0 {
		t.Errorf("hub's Stats() = %+v: want the cache's status stream reset (a change of 20 keys, a queue of 4)", s)
	}
	if s := f.cache.Stats(); s.Starts != 1 || s.Failures != 0 {
		t.Errorf("Stats() = %+v: want one start, no failure", s)
	}
}

// A write outside the model's namespace moves etcd's revision with no
// change the hub sees: the cache gets there all the same, through etcd's
// progress report.
func TestWriteElsewhere(t *testing.T) {
	f := newFixture(t, watchhub.Config{}, modelcache.Config{})
	f.same("empty")
	if _, err := etcdtest.Client(t).Put(f.ctx, "elsewhere/"+t.Name(), "x"); err != nil {
		t.Fatal(err)
	}
	rev, err := f.st.Revision(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := f.cache.Model(f.ctx, rev); err != nil || m.Revision < rev {
		t.Fatalf("Model(%d) after a write elsewhere = %v; want the model at revision %d or later", rev, err, rev)
	}
}

// A cache starting after a write outside the model's namespace lists at
// a revision the hub has not handed out: it gets there all the same.
func TestStartAfterAWriteElsewhere(t *testing.T) {
	f := newFixture(t, watchhub.Config{}, modelcache.Config{})
	if _, err := etcdtest.Client(t).Put(f.ctx, "elsewhere/"+t.Name(), "x"); err != nil {
		t.Fatal(err)
	}
	f.same("started after a write elsewhere")
}

// A cache that cannot get to the revision asked for says so within its
// wait, and gets there once the changes come.
func TestBehind(t *testing.T) {
	f := newFixture(t, watchhub.Config{}, modelcache.Config{Wait: 100 * time.Millisecond})
	f.same("empty")
	f.gate.Hold(true)
	if _, err := f.st.AddMachines(f.ctx, 2); err != nil {
		t.Fatal(err)
	}
	rev, err := f.st.Revision(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cache.Model(f.ctx, rev); !errors.Is(err, modelcache.ErrBehind) {
		t.Fatalf("Model(%d) with the changes held back = %v, want ErrBehind", rev, err)
	}
	f.gate.Hold(false)
	if m := f.same("changes let through"); len(m.Machines) != 2 {
		t.Fatalf("the model has %d machines, want 2", len(m.Machines))
	}
	if s := f.cache.Stats(); s.Behind != 1 || s.Starts != 1 {
		t.Errorf("Stats() = %+v: want one call behind, one start", s)
	}
}

// An idle cache stops, dropping its model, and the next call starts it
// again, from a new listing.
func TestIdleStopAndRestart(t *testing.T) {
	// Longer than the test's polls are apart (250 ms at most): the cache
	// is not stopped while they ask.
	f := newFixture(t, watchhub.Config{}, modelcache.Config{Idle: 500 * time.Millisecond})
	if _, err := f.st.AddMachines(f.ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.same("one machine")
	poll.UntilSays(t, "the cache stops, idle", func() (bool, string) {
		s := f.cache.Stats()
		return !s.Keeping && !s.Ready && s.IdleStops == 1, fmt.Sprintf("%+v", s)
	})
	if _, err := f.st.AddMachines(f.ctx, 1); err != nil {
		t.Fatal(err)
	}
	rev, err := f.st.Revision(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cache.Model(f.ctx, rev); !errors.Is(err, modelcache.ErrStarting) {
		t.Fatalf("Model(%d) of a stopped cache = %v, want ErrStarting", rev, err)
	}
	if m := f.same("restarted"); len(m.Machines) != 2 {
		t.Fatalf("the model has %d machines, want 2", len(m.Machines))
	}
	if s := f.cache.Stats(); s.Starts != 2 || s.Failures != 0 {
		t.Errorf("Stats() = %+v: want two starts, no failure", s)
	}
}

// Without Run, the cache answers nothing.
func TestNotRunning(t *testing.T) {
	hub, err := watchhub.New(watchhub.Config{Source: statetest.NewHeldChanges(nil)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := modelcache.New(modelcache.Config{Hub: hub})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Model(context.Background(), 1); !errors.Is(err, modelcache.ErrNotRunning) {
		t.Fatalf("Model without Run = %v, want ErrNotRunning", err)
	}
}

// What a caller keeps beside the cache's model is there while the model
// is the cache's, and gone once the model changes or the cache stops.
func TestKeepIsDroppedWithTheModel(t *testing.T) {
	f := newFixture(t, watchhub.Config{}, modelcache.Config{Idle: 500 * time.Millisecond})
	m := f.same("empty")
	m = f.cached(m.Revision)
	f.cache.Keep(m, "built")
	if got := f.cache.Kept(m); got != "built" {
		t.Fatalf("Kept of the model kept beside = %v, want built", got)
	}
	if got := f.cache.Kept(&state.Model{Revision: m.Revision}); got != nil {
		t.Fatalf("Kept of another model = %v, want nil", got)
	}
	// A write outside the model moves the revision, not the model.
	if _, err := etcdtest.Client(t).Put(f.ctx, "elsewhere/"+t.Name(), "x"); err != nil {
		t.Fatal(err)
	}
	later := f.same("after a write elsewhere")
	if later = f.cached(later.Revision); later == m || f.cache.Kept(later) != "built" {
		t.Fatalf("Kept of the model at a later revision, unchanged = %v, want built", f.cache.Kept(later))
	}
	m = later
	if _, err := f.st.AddMachines(f.ctx, 1); err != nil {
		t.Fatal(err)
	}
	next := f.same("one machine")
	next = f.cached(next.Revision)
	if got := f.cache.Kept(next); got != nil {
		t.Fatalf("Kept of the changed model = %v, want nil", got)
	}
	f.cache.Keep(m, "stale")
	if got := f.cache.Kept(next); got != nil {
		t.Fatalf("Kept after keeping beside a model gone = %v, want nil", got)
	}
	f.cache.Keep(next, "built again")
	poll.UntilSays(t, "the cache stops, idle", func() (bool, string) {
		s := f.cache.Stats()
		return !s.Keeping, fmt.Sprintf("%+v", s)
	})
	if got := f.cache.Kept(next); got != nil {
		t.Fatalf("Kept after the cache stopped = %v, want nil", got)
	}
}

package manifest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// rpcExecutor does the built-in actions through a real controller's
// OperatorService, as ctl apply does, without waiting for units to
// settle (the test controller has no agents). skip names resources whose
// actions it leaves undone.
type rpcExecutor struct {
	e    *controllertest.Env
	op   pb.OperatorServiceClient
	skip map[string]bool
	mu   sync.Mutex
	done []string
}

func (x *rpcExecutor) Do(ctx context.Context, c *Checked, rp *ResourcePlan) error {
	x.mu.Lock()
	x.done = append(x.done, rp.Name)
	x.mu.Unlock()
	if x.skip[rp.Name] {
		return nil
	}
	claim := func(kind, id string) error {
		_, err := x.op.ClaimOwnership(ctx, &pb.ClaimOwnershipRequest{Manifest: c.Manifest.Name,
			Entities: []*pb.OwnedEntity{{Kind: kind, Id: id, Resource: rp.Name}}})
		return err
	}
	for _, a := range rp.Actions {
		var err error
		switch a.Kind {
		case ActCreateService:
			x.mu.Lock()
			rec := x.e.Upload(x.op, c.Charms[rp.Name].Path)
			x.mu.Unlock()
			settings := map[string]string{}
			for k, v := range a.Config {
				settings[k] = fmt.Sprint(v)
			}
			if _, err = x.op.Deploy(ctx, &pb.DeployRequest{Charm: rec.Name, Revision: rec.Revision, Service: rp.Name,
				NumUnits: int32(a.Count.(int64)), To: a.To, Config: settings}); err == nil {
				err = claim("service", rp.Name)
			}
		case ActSetConfig:
			set := map[string]string{}
			for _, ch := range a.Changes {
				set[ch.Key] = fmt.Sprint(ch.New)
			}
			_, err = x.op.SetConfig(ctx, &pb.SetConfigRequest{Service: a.Service, Set: set})
		case ActAddUnits:
			_, err = x.op.AddUnits(ctx, &pb.AddUnitsRequest{Service: a.Service, NumUnits: int32(a.Count.(int64))})
		case ActAddRelation:
			var eps []string
			for _, ep := range a.Endpoints {
				eps = append(eps, ep.(string))
			}
			var resp *pb.AddRelationResponse
			if resp, err = x.op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: eps}); err == nil {
				err = claim("relation", strconv.FormatInt(resp.Relation.Id, 10))
			}
		case ActAddMachines:
			var resp *pb.AddMachinesResponse
			if resp, err = x.op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: int32(a.Count.(int64))}); err == nil {
				for _, m := range resp.Machines {
					if err = claim("machine", m.Id); err != nil {
						break
					}
				}
			}
		default:
			err = fmt.Errorf("cannot do %s", a.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a.Describe(), err)
		}
	}
	return nil
}

func checked(t *testing.T, src string) *Checked {
	t.Helper()
	c, err := Check(context.Background(), parse(t, src), Options{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return c
}

// TestApply applies the demo (and a machine resource) from empty against
// a real controller: dependencies before dependents, web's port rendered
// from db's state as applied; a plan after it has no changes, and applying
// again does nothing. A variable's change applies as one set-config.
func TestApply(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{})
	op := e.Operator()
	ctx := context.Background()
	src := demo + "  hosts:\n    type: machine\n    config: {count: 2}\n"
	c := checked(t, src)
	x := &rpcExecutor{e: e, op: op}
	var mu sync.Mutex
	var events []string
	res, err := c.Apply(ctx, ApplyOptions{Model: op, Exec: x, Parallelism: 3, Progress: func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev.Resource+" "+ev.Phase)
	}})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(res.Applied) != 6 || len(res.Failed) != 0 || len(res.Skipped) != 0 {
		t.Errorf("Apply = %+v, want 6 applied", res)
	}
	before := func(a, b string) {
		t.Helper()
		if i, j := slices.Index(events, a+" applied"), slices.Index(events, b+" applying"); i < 0 || j < 0 || i > j {
			t.Errorf("events %v: want %s applied before %s starts", events, a, b)
		}
	}
	before("db", "web")
	before("web", "web-db")
	before("db", "web-db")
	before("web", "web-logger")
	before("logger", "web-logger")

	p, err := c.Plan(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if p.Changes() {
		t.Errorf("after apply the plan has changes: %v", describe(p))
	}
	web := p.Resources[slices.IndexFunc(p.Resources, func(r *ResourcePlan) bool { return r.Name == "web" })]
	if port := web.State["config"].(map[string]any)["port"]; port != int64(8070) {
		t.Errorf("web's port = %v, want 8070 (db's 7070 + 1000)", port)
	}
	x.done = nil
	if _, err := c.Apply(ctx, ApplyOptions{Model: op, Exec: x}); err != nil || len(x.done) != 0 {
		t.Errorf("applying again: %v, did %v; want nothing done", err, x.done)
	}

	c2 := checked(t, strings.Replace(src, "db.state.config.port + 1000", "db.state.config.port + 1001", 1))
	p, err = c2.Plan(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(p); !slices.Contains(got, "web STALE; set config of web: port: 8070 → 8071") {
		t.Errorf("plan of a changed offset: %v", got)
	}
	if _, err := c2.Apply(ctx, ApplyOptions{Model: op, Exec: x}); err != nil {
		t.Fatalf("Apply the change: %v", err)
	}
	revs, err := op.ListRevisions(ctx, &pb.ListRevisionsRequest{Service: "web"})
	if err != nil || len(revs.Revisions) != 2 {
		t.Errorf("web's revisions after the change: %v, %v; want 2", revs, err)
	}
}

// TestApplyHaltsWhenStillStale: a resource whose actions leave it STALE
// halts the apply with a *StillStale naming it, its action and what is
// still stale; what depends on it is skipped; without --keep-going what
// has not started is skipped too, with it independent resources finish.
func TestApplyHaltsWhenStillStale(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{})
	op := e.Operator()
	ctx := context.Background()
	c := checked(t, demo)
	x := &rpcExecutor{e: e, op: op, skip: map[string]bool{"db": true}}
	res, err := c.Apply(ctx, ApplyOptions{Model: op, Exec: x, Parallelism: 1, KeepGoing: true})
	var ae *ApplyError
	if !errors.As(err, &ae) {
		t.Fatalf("Apply = %v, want an *ApplyError", err)
	}
	var ss *StillStale
	if !errors.As(ae.Failed["db"], &ss) || ss.Resource != "db" || !strings.Contains(ss.Action, "create service db") ||
		len(ss.Remaining) != 1 || ss.Remaining[0].Kind != ActCreateService {
		t.Errorf("db's error = %v, want still STALE after its create", ae.Failed["db"])
	}
	if !strings.Contains(err.Error(), "resource db is still STALE after create service db") {
		t.Errorf("error %q, want it to name db and its action", err)
	}
	if want := []string{"web", "web-db", "web-logger"}; !reflect.DeepEqual(sortedCopy(res.Skipped), want) {
		t.Errorf("skipped %v, want %v (depending on db)", res.Skipped, want)
	}
	if len(res.Applied) != 1 || res.Applied[0].Name != "logger" {
		t.Errorf("applied %v, want logger (independent, --keep-going)", res.Applied)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestPruneAndExport: pruning lists only what the manifest owns and no
// longer names, never a service deployed by hand; the model exported and
// planned again has no actions.
func TestPruneAndExport(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{})
	op := e.Operator()
	ctx := context.Background()
	c := checked(t, demo)
	if _, err := c.Apply(ctx, ApplyOptions{Model: op, Exec: &rpcExecutor{e: e, op: op}}); err != nil {
		t.Fatal(err)
	}
	rec := e.Upload(op, filepath.Join(charmsDir, "kv"))
	if _, err := op.Deploy(ctx, &pb.DeployRequest{Charm: rec.Name, Revision: rec.Revision, Service: "hand", NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	// Without logger and web-logger.
	src := strings.Split(demo, "  logger:\n")[0]
	destroy, err := checked(t, src).PlanPrune(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range destroy {
		got = append(got, a.Describe())
	}
	if want := []string{"destroy service logger"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PlanPrune = %v, want %v (web-logger goes with logger; hand is not owned)", got, want)
	}
	// Without the relation only: the relation.
	src = strings.Split(demo, "  web-logger:\n")[0]
	if destroy, err = checked(t, src).PlanPrune(ctx, op); err != nil || len(destroy) != 1 || destroy[0].Kind != ActDestroyRelation {
		t.Errorf("PlanPrune without web-logger = %v, %v; want its relation", destroy, err)
	}

	dir, err := filepath.Abs(charmsDir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := Export(ctx, op, ExportOptions{Name: "shop", CharmDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data, t.TempDir())
	if err != nil {
		t.Fatalf("Parse the export: %v\n%s", err, data)
	}
	p, err := Plan(ctx, m, op, Options{})
	if err != nil {
		t.Fatalf("Plan the export: %v\n%s", err, data)
	}
	if p.Changes() || len(p.Resources) != 6 {
		t.Errorf("the export planned: %v, want 6 resources and no changes\n%s", describe(p), data)
	}
}

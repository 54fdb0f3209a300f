package manifest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// BenchmarkPlanConverged plans a manifest of 200 services (100 kv, 100
// app, 10 units each, on one machine), and 400 relations against a
// model that matches it: the time of a plan with nothing to do.
func BenchmarkPlanConverged(b *testing.B) {
	const pairs, units = 100, 10
	e := controllertest.New(b, controllertest.Options{})
	op := e.Operator()
	if _, err := op.AddMachines(e.Ctx, &pb.AddMachinesRequest{NumMachines: 1}); err != nil {
		b.Fatal(err)
	}
	kv := e.Upload(op, filepath.Join(charmsDir, "kv"))
	app := e.Upload(op, filepath.Join(charmsDir, "app"))
	var src strings.Builder
	src.WriteString("name: big\nresources:\n")
	for i := range pairs {
		for _, d := range []struct {
			rec  *pb.Charm
			name string
		}{{kv, fmt.Sprintf("db%d", i)}, {app, fmt.Sprintf("web%d", i)}} {
			if _, err := op.Deploy(e.Ctx, &pb.DeployRequest{Charm: d.rec.Name, Revision: d.rec.Revision, Service: d.name, NumUnits: units, To: "0"}); err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(&src, "  %s: {type: service, config: {charm: %s, units: %d, to: \"0\"}}\n", d.name, d.rec.Name, units)
		}
	}
	for i := range pairs {
		for k := range 4 {
			eps := []string{fmt.Sprintf("web%d:db", i), fmt.Sprintf("db%d:server", (i+k)%pairs)}
			if _, err := op.AddRelation(e.Ctx, &pb.AddRelationRequest{Endpoints: eps}); err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(&src, "  rel%dx%d: {type: relation, config: {endpoints: [%q, %q]}}\n", i, k, eps[0], eps[1])
		}
	}
	m, err := Parse([]byte(src.String()), charmsDir)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		p, err := Plan(context.Background(), m, op, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if p.Changes() {
			b.Fatalf("plan of the converged model has changes: %v", describe(p)[:3])
		}
	}
}

// BenchmarkApplyFromEmpty applies a manifest of 200 services (100 kv, 100
// app, 10 units each, on one machine) and 400 relations to an empty model
// through a real controller's OperatorService, each resource re-checked
// VALID after its actions: the control plane's part of an apply (the
// test controller has no agents, so nothing waits for units to settle).
func BenchmarkApplyFromEmpty(b *testing.B) {
	const pairs, units = 100, 10
	var src strings.Builder
	src.WriteString("name: big\nresources:\n")
	for i := range pairs {
		fmt.Fprintf(&src, "  db%d: {type: service, config: {charm: kv, units: %d, to: \"0\"}}\n", i, units)
		fmt.Fprintf(&src, "  web%d: {type: service, config: {charm: app, units: %d, to: \"0\"}}\n", i, units)
	}
	for i := range pairs {
		for k := range 4 {
			fmt.Fprintf(&src, "  rel%dx%d: {type: relation, config: {endpoints: [\"web%d:db\", \"db%d:server\"]}}\n", i, k, i, (i+k)%pairs)
		}
	}
	m, err := Parse([]byte(src.String()), charmsDir)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		e := controllertest.New(b, controllertest.Options{})
		op := e.Operator()
		if _, err := op.AddMachines(e.Ctx, &pb.AddMachinesRequest{NumMachines: 1}); err != nil {
			b.Fatal(err)
		}
		c, err := Check(context.Background(), m, Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := c.Apply(context.Background(), ApplyOptions{Model: op, Exec: &rpcExecutor{e: e, op: op}})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Applied) != 6*pairs {
			b.Fatalf("applied %d resources", len(res.Applied))
		}
	}
}

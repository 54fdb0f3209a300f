package state_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// port is a static port claim of one port.
func port(n uint32, protocol string) *pb.StaticPortClaim {
	return &pb.StaticPortClaim{From: n, To: n, Protocol: protocol}
}

// file is a static file claim; content "" stands for a template.
func file(path, content string, mode uint32) *pb.StaticFileClaim {
	f := &pb.StaticFileClaim{Path: path, Mode: mode}
	if content != "" {
		sum := sha256.Sum256([]byte(content))
		f.Sha256 = sum[:]
	}
	return f
}

// addClaiming stores a charm named name with the static claims (a new
// revision when it is there already) and deploys it as service svc.
func addClaiming(t testing.TB, ctx context.Context, st *state.State, svc, name string, sub bool, claims *pb.StaticClaims) {
	t.Helper()
	rec, err := st.AddCharm(ctx, &pb.Charm{Name: name, Subordinate: sub, StaticClaims: claims}, []byte("archive of "+svc+" "+name))
	must(t, "AddCharm", err)
	eps := appEndpoints
	if sub {
		eps = loggerEndpoints
	}
	_, err = st.AddService(ctx, state.AddServiceArgs{
		Name: svc, Charm: &pb.CharmRef{Name: name, Revision: rec.Revision, Sha256: rec.Sha256}, Endpoints: eps, Subordinate: sub,
	})
	must(t, "AddService("+svc+")", err)
}

// refusedP1 checks that err is P1's refusal, one line, saying msg, and
// that machine m's principals are still want.
func refusedP1(t *testing.T, ctx context.Context, st *state.State, what string, err error, msg, m string, want []string) {
	t.Helper()
	wantErr(t, what, err, state.ErrRefused, "P1", msg)
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("%s = %q, want one line", what, err)
	}
	got, err := st.MachinePrincipals(ctx, m)
	must(t, "MachinePrincipals", err)
	if !slices.Equal(got, want) {
		t.Errorf("after %s, machine %s has %v, want %v", what, m, got, want)
	}
}

func TestPlacementClaims(t *testing.T) {
	st, ctx := newState(t)
	web := &pb.StaticClaims{
		Ports:    []*pb.StaticPortClaim{port(8080, "tcp")},
		Files:    []*pb.StaticFileClaim{file("/etc/shared", "a", 0o644)},
		Packages: []*pb.StaticPackageClaim{{Name: "nginx", Version: "1.0"}},
	}
	addClaiming(t, ctx, st, "web", "web", false, web)
	addUnits(t, ctx, st, "web", 1, state.Placement{}) // web/0 on machine 0
	for _, s := range []struct {
		name   string
		claims *pb.StaticClaims
	}{
		{"kv", &pb.StaticClaims{Ports: []*pb.StaticPortClaim{port(8080, "tcp")}}},
		{"api", &pb.StaticClaims{Ports: []*pb.StaticPortClaim{{From: 8000, To: 8100, Protocol: "tcp"}}}},
		{"other", &pb.StaticClaims{Files: []*pb.StaticFileClaim{file("/etc/shared", "b", 0o644)}}},
		{"mode", &pb.StaticClaims{Files: []*pb.StaticFileClaim{file("/etc/shared", "a", 0o600)}}},
		{"pin", &pb.StaticClaims{Packages: []*pb.StaticPackageClaim{{Name: "nginx", Version: "2.0"}}}},
		{"udp", &pb.StaticClaims{Ports: []*pb.StaticPortClaim{port(8080, "udp")}}},
		{"same", &pb.StaticClaims{Files: []*pb.StaticFileClaim{file("/etc/shared", "a", 0o644)}, Packages: []*pb.StaticPackageClaim{{Name: "nginx"}}}},
		{"tmpl", &pb.StaticClaims{Files: []*pb.StaticFileClaim{file("/etc/shared", "", 0o644)}, Packages: []*pb.StaticPackageClaim{{Name: "nginx", Version: "1.0"}}}},
		{"plain", nil},
	} {
		addClaiming(t, ctx, st, s.name, s.name, false, s.claims)
	}
	on0 := []string{"web/0"}
	for _, tt := range []struct{ service, msg string }{
		{"kv", "cannot place kv/0 on machine 0: port 8080/tcp is claimed by web/0 there"},
		{"api", "cannot place api/0 on machine 0: port 8000-8100/tcp is claimed by web/0 there (as 8080/tcp)"},
		{"other", "cannot place other/0 on machine 0: file /etc/shared is claimed by web/0 there with other content"},
		{"mode", "cannot place mode/0 on machine 0: file /etc/shared is claimed by web/0 there with mode 0644"},
		{"pin", "cannot place pin/0 on machine 0: package nginx is claimed by web/0 there at version 1.0"},
	} {
		_, err := st.AddUnits(ctx, tt.service, 1, state.Placement{Machine: "0"})
		refusedP1(t, ctx, st, "AddUnits("+tt.service+" --to 0)", err, tt.msg, "0", on0)
	}

	// Checked before a service is made, its units are named as AddUnits
	// would name them; a service that exists is left to AddService.
	kv, err := st.Service(ctx, "kv")
	must(t, "Service", err)
	err = st.CheckPlacement(ctx, "kv2", kv.Charm, "0", 1)
	refusedP1(t, ctx, st, "CheckPlacement(kv2, 0)", err, "cannot place kv2/0 on machine 0: port 8080/tcp is claimed by web/0 there", "0", on0)
	if err := st.CheckPlacement(ctx, "web", kv.Charm, "0", 1); err != nil {
		t.Errorf("CheckPlacement(web, 0) = %v, want it left to AddService", err)
	}

	// A unit assigned later, and a subordinate beside its principal, are
	// placements too.
	us := addUnits(t, ctx, st, "kv", 1, state.Placement{Unassigned: true})
	err = st.AssignUnit(ctx, us[0].Name, "0")
	refusedP1(t, ctx, st, "AssignUnit(kv/1, 0)", err, "cannot place kv/1 on machine 0: port 8080/tcp is claimed by web/0 there", "0", on0)
	addClaiming(t, ctx, st, "logger", "logger", true, &pb.StaticClaims{Ports: []*pb.StaticPortClaim{port(8080, "tcp")}})
	_, err = st.AddSubordinate(ctx, "web/0", "logger")
	refusedP1(t, ctx, st, "AddSubordinate(web/0, logger)", err, "cannot place logger/0 on machine 0: port 8080/tcp is claimed by web/0 there", "0", on0)
	if subs, err := st.Subordinates(ctx, "web/0"); err != nil || len(subs) != 0 {
		t.Errorf("Subordinates(web/0) = %v, %v, want none", subs, err)
	}
	addClaiming(t, ctx, st, "beat", "beat", true, &pb.StaticClaims{Files: []*pb.StaticFileClaim{file("/etc/beat", "x", 0o600)}})
	if _, err := st.AddSubordinate(ctx, "web/0", "beat"); err != nil {
		t.Fatalf("AddSubordinate(web/0, beat) = %v, want it placed", err)
	}

	// What does not conflict is placed: another protocol, the same file
	// and package, a templated content at the same mode, no claims.
	for _, s := range []string{"udp", "same", "tmpl", "plain"} {
		addUnits(t, ctx, st, s, 1, state.Placement{Machine: "0"})
	}
	// A subordinate's claims are the machine's too.
	addClaiming(t, ctx, st, "beat2", "beat2", false, &pb.StaticClaims{Files: []*pb.StaticFileClaim{file("/etc/beat", "y", 0o600)}})
	_, err = st.AddUnits(ctx, "beat2", 1, state.Placement{Machine: "0"})
	refusedP1(t, ctx, st, "AddUnits(beat2 --to 0)", err, "cannot place beat2/0 on machine 0: file /etc/beat is claimed by beat/0 there with other content",
		"0", []string{"plain/0", "same/0", "tmpl/0", "udp/0", "web/0"})

	// Forced, a conflicting unit is placed all the same.
	forced, err := st.AddUnits(ctx, "kv", 1, state.Placement{Machine: "0", Force: true})
	if err != nil || forced[0].MachineId != "0" {
		t.Fatalf("AddUnits(kv --to 0 --force) = %v, %v, want kv on machine 0", forced, err)
	}

	// Units added together conflict with each other; those whose claims
	// agree do not.
	ms, err := st.AddMachines(ctx, 1)
	must(t, "AddMachines", err)
	m := ms[0].Id
	err = st.CheckPlacement(ctx, "kv2", kv.Charm, m, 2)
	refusedP1(t, ctx, st, "CheckPlacement(kv2 -n 2, "+m+")", err, "cannot place kv2/1 on machine "+m+": port 8080/tcp is claimed by kv2/0 there", m, nil)
	if err := st.CheckPlacement(ctx, "kv2", kv.Charm, m, 1); err != nil {
		t.Errorf("CheckPlacement(kv2, %s) = %v, want no conflict on an empty machine", m, err)
	}
	_, err = st.AddUnits(ctx, "kv", 2, state.Placement{Machine: m})
	refusedP1(t, ctx, st, "AddUnits(kv -n 2 --to "+m+")", err, "cannot place kv/4 on machine "+m+": port 8080/tcp is claimed by kv/3 there", m, nil)
	addUnits(t, ctx, st, "same", 2, state.Placement{Machine: m})
	// A new machine has nobody to conflict with.
	addUnits(t, ctx, st, "kv", 2, state.Placement{})
}

// A unit is compared at the revision it runs and at the one it is
// moving to; a new unit at its rollout's target.
func TestPlacementClaimsMidRollout(t *testing.T) {
	st, ctx := newState(t)
	addClaiming(t, ctx, st, "web", "web", false, nil)
	addUnits(t, ctx, st, "web", 1, state.Placement{}) // web/0 on machine 0
	rec, err := st.AddCharm(ctx, &pb.Charm{Name: "web", StaticClaims: &pb.StaticClaims{Ports: []*pb.StaticPortClaim{port(8080, "tcp")}}}, []byte("web 2"))
	must(t, "AddCharm", err)
	_, err = st.ChangeSpec(ctx, "web", state.SpecChange{Reason: "refresh", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		return &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "web", Revision: rec.Revision, Sha256: rec.Sha256}, Config: head.Spec.Config}, nil, nil
	}})
	must(t, "ChangeSpec", err)
	addClaiming(t, ctx, st, "kv", "kv", false, &pb.StaticClaims{Ports: []*pb.StaticPortClaim{port(8080, "tcp")}})

	// web/0 runs revision 1 and has no permit yet: nothing of it
	// conflicts. A new unit of web starts on revision 2 and does.
	ms, err := st.AddMachines(ctx, 1)
	must(t, "AddMachines", err)
	addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: ms[0].Id})
	_, err = st.AddUnits(ctx, "web", 1, state.Placement{Machine: ms[0].Id})
	refusedP1(t, ctx, st, "AddUnits(web --to 1)", err, "cannot place web/1 on machine 1: port 8080/tcp is claimed by kv/0 there", "1", []string{"kv/0"})

	granted, err := st.GrantPermits(ctx, "web", 2, []string{"web/0"})
	if err != nil || len(granted) != 1 {
		t.Fatalf("GrantPermits(web/0) = %v, %v, want it granted", granted, err)
	}
	_, err = st.AddUnits(ctx, "kv", 1, state.Placement{Machine: "0"})
	refusedP1(t, ctx, st, "AddUnits(kv --to 0)", err, "cannot place kv/1 on machine 0: port 8080/tcp is claimed by web/0 there", "0", []string{"web/0"})
}

// Two conflicting placements on one machine at once: exactly one wins,
// whether both are principals or one is a subordinate.
func TestRacePlacementClaims(t *testing.T) {
	st, ctx := newState(t)
	mon := statetest.Start(t, st)
	claims := &pb.StaticClaims{Ports: []*pb.StaticPortClaim{port(8080, "tcp")}}
	addClaiming(t, ctx, st, "a", "a", false, claims)
	addClaiming(t, ctx, st, "b", "b", false, claims)
	addClaiming(t, ctx, st, "host", "host", false, nil)
	addClaiming(t, ctx, st, "logger", "logger", true, claims)
	for round := 0; round < raceRounds; round++ {
		ms, err := st.AddMachines(ctx, 1)
		must(t, "AddMachines", err)
		m := ms[0].Id
		host := addUnits(t, ctx, st, "host", 1, state.Placement{Machine: m})[0].Name
		place := func(svc string) func() error {
			return func() error {
				_, err := st.AddUnits(ctx, svc, 1, state.Placement{Machine: m})
				return err
			}
		}
		sub := func() error {
			_, err := st.AddSubordinate(ctx, host, "logger")
			return err
		}
		for _, fs := range [][]func() error{{place("a"), place("b")}, {place("a"), sub}} {
			errs := parallel(fs...)
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case errors.Is(err, state.ErrRefused) && state.RuleOf(err) == "P1":
				default:
					t.Errorf("round %d: a placement on machine %s = %v, want placed or refused by P1", round, m, err)
				}
			}
			if won != 1 {
				t.Fatalf("round %d: %d of two conflicting placements on machine %s won (%v), want 1", round, won, m, errs)
			}
			// The machine is free again for the next pair: every unit
			// but the host goes.
			principals, err := st.MachinePrincipals(ctx, m)
			must(t, "MachinePrincipals", err)
			subs, err := st.Subordinates(ctx, host)
			must(t, "Subordinates", err)
			for _, u := range append(subs, principals...) {
				if u == host {
					continue
				}
				must(t, "DestroyUnit", st.DestroyUnit(ctx, u, state.DestroyOptions{}))
				must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, u))
				must(t, "RemoveUnit", st.RemoveUnit(ctx, u))
			}
		}
	}
	mon.Stop(t)
}

// claimingCharms stores the charms the randomized test deploys: one
// without a record, one claiming nothing, and some whose static claims
// conflict (the same port, one file with two contents, one package at two
// versions) or do not (another protocol).
func claimingCharms(t testing.TB, ctx context.Context, st *state.State) []*pb.CharmRef {
	t.Helper()
	refs := []*pb.CharmRef{{Name: "c", Revision: 1}}
	for i, claims := range []*pb.StaticClaims{
		nil,
		{Ports: []*pb.StaticPortClaim{port(8080, "tcp")}},
		{Ports: []*pb.StaticPortClaim{{From: 8000, To: 8100, Protocol: "tcp"}}, Packages: []*pb.StaticPackageClaim{{Name: "nginx"}}},
		{Ports: []*pb.StaticPortClaim{port(8080, "udp")}, Files: []*pb.StaticFileClaim{file("/etc/x", "a", 0o644)}},
		{Files: []*pb.StaticFileClaim{file("/etc/x", "b", 0o644)}, Packages: []*pb.StaticPackageClaim{{Name: "nginx", Version: "1"}}},
		{Packages: []*pb.StaticPackageClaim{{Name: "nginx", Version: "2"}}},
	} {
		name := "claims" + string(rune('a'+i))
		rec, err := st.AddCharm(ctx, &pb.Charm{Name: name, StaticClaims: claims}, []byte(name))
		must(t, "AddCharm", err)
		refs = append(refs, &pb.CharmRef{Name: name, Revision: rec.Revision, Sha256: rec.Sha256})
	}
	return refs
}

// checkPlacedClaims fails the test when two units on a machine, principal
// or subordinate, have static claims that conflict: every placement on a
// machine was checked (none forced) and no revision changed.
func checkPlacedClaims(t *testing.T, ctx context.Context, st *state.State) {
	t.Helper()
	machines, err := st.Machines(ctx)
	must(t, "Machines", err)
	claimsOf := map[string]*pb.StaticClaims{}
	for _, m := range machines {
		principals, err := st.MachinePrincipals(ctx, m.Id)
		must(t, "MachinePrincipals", err)
		units := principals
		for _, p := range principals {
			subs, err := st.Subordinates(ctx, p)
			must(t, "Subordinates", err)
			units = append(units, subs...)
		}
		var claims []*pb.StaticClaims
		for _, u := range units {
			svc, err := st.Service(ctx, strings.Split(u, "/")[0])
			must(t, "Service", err)
			key := svc.Charm.Name
			c, ok := claimsOf[key]
			if !ok {
				rec, err := st.Charm(ctx, svc.Charm.Name, svc.Charm.Revision)
				if err != nil && !errors.Is(err, state.ErrNotFound) {
					t.Fatalf("Charm(%s): %v", key, err)
				}
				c = rec.GetStaticClaims()
				claimsOf[key] = c
			}
			claims = append(claims, c)
		}
		for i := range units {
			for j := range i {
				if what := state.StaticConflict(claims[i], claims[j]); what != "" {
					t.Errorf("on machine %s, %s and %s conflict: %s", m.Id, units[i], units[j], strings.Replace(what, "%s", units[j], 1))
				}
			}
		}
	}
}

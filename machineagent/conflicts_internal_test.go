package machineagent

import (
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostclaims"
)

// ports returns claims of the given TCP ports.
func ports(ps ...uint16) *hostclaims.Claims {
	c := &hostclaims.Claims{}
	for _, p := range ps {
		c.Ports = append(c.Ports, charm.PortRange{From: p, To: p, Protocol: "tcp"})
	}
	return c
}

func check(t *testing.T, g *claimsGate, unit string, c *hostclaims.Claims) hostclaims.UnitResult {
	t.Helper()
	res, err := g.Check(context.Background(), unit, c)
	if err != nil {
		t.Fatalf("Check(%s) = %v", unit, err)
	}
	return res
}

func conflictsOf(r hostclaims.UnitResult) []string {
	var out []string
	for _, c := range r.Conflicts {
		out = append(out, c.String())
	}
	return out
}

// TestGateRollsBackTheChangedUnit: a unit asking for a port another unit
// holds is rolled back, the conflict named; the holder may change its own
// claims; a unit that holds nothing yet is rolled back to nothing.
func TestGateRollsBackTheChangedUnit(t *testing.T) {
	g := openGate(t.TempDir(), time.Millisecond, hclog.NewNullLogger())
	g.see("kv/0")
	g.see("web/0")
	g.Holds("kv/0", ports(8080))
	g.Holds("web/0", ports(9000))
	res := check(t, g, "web/0", ports(8080))
	if res.Outcome != hostclaims.RolledBack || len(res.Conflicts) != 1 || res.Conflicts[0].String() != "port 8080/tcp is claimed by kv/0" {
		t.Errorf("web/0 asking for 8080: %v %q, want rolled back, claimed by kv/0", res.Outcome, conflictsOf(res))
	}
	if res := check(t, g, "kv/0", ports(8080, 8081)); res.Outcome != hostclaims.Kept {
		t.Errorf("kv/0 asking for 8080 and 8081: %v %q, want kept", res.Outcome, conflictsOf(res))
	}
	// kv/0's approved claims weigh before its job ends.
	if res := check(t, g, "new/0", ports(8081)); res.Outcome != hostclaims.RolledBack || res.Claims != nil {
		t.Errorf("new/0 asking for 8081: %v %v, want rolled back to nothing", res.Outcome, res.Claims)
	}
	// kv/0's job gave up: it holds 8080 alone.
	g.Holds("kv/0", ports(8080))
	if res := check(t, g, "new/0", ports(8081)); res.Outcome != hostclaims.Kept {
		t.Errorf("new/0 asking for 8081 once kv/0 holds 8080: %v %q, want kept", res.Outcome, conflictsOf(res))
	}
}

// TestGatePassWeighsAsksTogether: three units asking together form one
// pass, in which the one with the most conflicts (the middle of a chain)
// is rolled back and the other two kept, whatever the order of the asks.
func TestGatePassWeighsAsksTogether(t *testing.T) {
	for _, order := range [][]string{{"a/0", "b/0", "c/0"}, {"b/0", "c/0", "a/0"}, {"c/0", "a/0", "b/0"}} {
		g := openGate(t.TempDir(), 300*time.Millisecond, hclog.NewNullLogger())
		asks := map[string]*hostclaims.Claims{"a/0": ports(8080), "b/0": ports(8080, 9090), "c/0": ports(9090)}
		var mu sync.Mutex
		got := map[string]hostclaims.Outcome{}
		var wg sync.WaitGroup
		for _, u := range order {
			wg.Go(func() {
				res, err := g.Check(context.Background(), u, asks[u])
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					got[u] = 0
					return
				}
				got[u] = res.Outcome
			})
			time.Sleep(10 * time.Millisecond) // one after another, within the window
		}
		wg.Wait()
		want := map[string]hostclaims.Outcome{"a/0": hostclaims.Kept, "b/0": hostclaims.RolledBack, "c/0": hostclaims.Kept}
		for u, w := range want {
			if got[u] != w {
				t.Errorf("asks in order %v: %s %v, want %v", order, u, got[u], w)
			}
		}
	}
}

// TestGateRecordSurvivesARestart: the order of the units and the claims
// held and approved are read again by the next gate on the directory; a
// unit forgotten is gone from it.
func TestGateRecordSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	g := openGate(dir, time.Millisecond, hclog.NewNullLogger())
	g.see("z/0")
	g.see("a/0")
	g.Holds("z/0", ports(8080))
	if res := check(t, g, "a/0", ports(9090)); res.Outcome != hostclaims.Kept {
		t.Fatalf("a/0 asking for 9090: %v", res.Outcome)
	}
	g2 := openGate(dir, time.Millisecond, hclog.NewNullLogger())
	if z, a := g2.rec.Units["z/0"], g2.rec.Units["a/0"]; z == nil || a == nil || z.Order >= a.Order {
		t.Fatalf("units read again: %+v, want z/0 before a/0", g2.rec.Units)
	}
	for _, p := range []uint16{8080, 9090} {
		if res := check(t, g2, "new/0", ports(p)); res.Outcome != hostclaims.RolledBack {
			t.Errorf("new/0 asking for %d after a restart: %v, want rolled back", p, res.Outcome)
		}
	}
	g2.forget("z/0")
	g3 := openGate(dir, time.Millisecond, hclog.NewNullLogger())
	if _, ok := g3.rec.Units["z/0"]; ok {
		t.Errorf("z/0 still recorded once forgotten")
	}
	if res := check(t, g3, "new/0", ports(8080)); res.Outcome != hostclaims.Kept {
		t.Errorf("new/0 asking for 8080 once z/0 is forgotten: %v, want kept", res.Outcome)
	}
	if g3.rec.Units["new/0"].Order <= g3.rec.Units["a/0"].Order {
		t.Errorf("new/0's order %d, a/0's %d: want the later one later", g3.rec.Units["new/0"].Order, g3.rec.Units["a/0"].Order)
	}
}

// TestGateWritesNothingForUnitsClaimingNothing: units started, telling
// the gate they hold no claims, and removed leave no record to write;
// the first unit to hold claims writes every unit's place.
func TestGateWritesNothingForUnitsClaimingNothing(t *testing.T) {
	dir := t.TempDir()
	g := openGate(dir, time.Millisecond, hclog.NewNullLogger())
	for _, u := range []string{"z/0", "a/0", "gone/0"} {
		g.see(u)
		g.Holds(u, nil)
	}
	g.forget("gone/0")
	if _, err := os.Stat(filepath.Join(dir, ClaimsFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the record after units claiming nothing came and went: %v, want none written", err)
	}
	g.Holds("a/0", ports(8080))
	g2 := openGate(dir, time.Millisecond, hclog.NewNullLogger())
	if z, a := g2.rec.Units["z/0"], g2.rec.Units["a/0"]; z == nil || a == nil || z.Order >= a.Order || g2.rec.Units["gone/0"] != nil {
		t.Fatalf("units read again: %+v, want z/0 before a/0, and gone/0 gone", g2.rec.Units)
	}
}

// TestGateHoldsTheLaterUnchangedUnit: two units holding the same port
// (placed before the check, say) are unchanged in a pass: the later one in
// the gate's order is held, whatever their names.
func TestGateHoldsTheLaterUnchangedUnit(t *testing.T) {
	g := openGate(t.TempDir(), time.Millisecond, hclog.NewNullLogger())
	g.see("z/0")
	g.see("a/0")
	g.Holds("z/0", ports(8080))
	g.Holds("a/0", ports(8080))
	g.mu.Lock()
	p := &gatePass{asks: map[string]*hostclaims.Claims{"other/0": ports(7070)}}
	g.resolve(p)
	g.mu.Unlock()
	for unit, want := range map[string]hostclaims.Outcome{"z/0": hostclaims.Kept, "a/0": hostclaims.Held, "other/0": hostclaims.Kept} {
		if r, _ := p.results.Result(unit); r.Outcome != want {
			t.Errorf("%s: %v, want %v", unit, r.Outcome, want)
		}
	}
}

// TestGateUnreadableRecord: a damaged record is set aside: the gate starts
// empty, for the unit agents to tell their claims again.
func TestGateUnreadableRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ClaimsFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := openGate(dir, time.Millisecond, hclog.NewNullLogger())
	if len(g.rec.Units) != 0 || g.rec.Next != 1 {
		t.Errorf("gate over a damaged record: %+v, want empty", g.rec)
	}
}

// TestGateRandomized runs random asks, jobs that end and agents that
// start again over a few units claiming ports of a small range, one ask at
// a time: since every unit starts with nothing and takes claims only
// through the gate, the claims the units stand on never conflict, and an
// ask is refused exactly when its claims conflict with another's.
func TestGateRandomized(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	g := openGate(dir, time.Nanosecond, hclog.NewNullLogger())
	units := []string{"a/0", "b/0", "c/0", "d/0", "e/0"}
	for _, u := range units {
		g.see(u)
	}
	randomPorts := func() *hostclaims.Claims {
		var ps []uint16
		for p := uint16(1); p <= 12; p++ {
			if rng.IntN(4) == 0 {
				ps = append(ps, p)
			}
		}
		return ports(ps...)
	}
	for i := range 300 {
		u := units[rng.IntN(len(units))]
		switch rng.IntN(4) {
		case 0, 1: // an ask, and its job ends (or not)
			c := randomPorts()
			want := hostclaims.Kept
			g.mu.Lock()
			for name, o := range g.rec.Units {
				if name != u && len(hostclaims.Conflicts(withUnit(c, u), withUnit(o.current(), name))) > 0 {
					want = hostclaims.RolledBack
				}
			}
			g.mu.Unlock()
			res := check(t, g, u, c)
			if res.Outcome != want {
				t.Fatalf("step %d: %s asking for %v: %v, want %v", i, u, c.Ports, res.Outcome, want)
			}
			if res.Outcome == hostclaims.Kept && rng.IntN(2) == 0 {
				g.Holds(u, c)
			}
		case 2: // its agent starts again, and tells what the host holds
			g.mu.Lock()
			held := g.rec.Units[u].Held
			g.mu.Unlock()
			g.Holds(u, held)
		case 3: // the machine agent starts again, and the units' agents
			g = openGate(dir, time.Nanosecond, hclog.NewNullLogger())
			for _, u := range units {
				g.see(u)
			}
		}
		g.mu.Lock()
		for a, x := range g.rec.Units {
			for b, y := range g.rec.Units {
				if a < b && len(hostclaims.Conflicts(withUnit(x.current(), a), withUnit(y.current(), b))) > 0 {
					t.Fatalf("step %d: %s (%v) and %s (%v) stand on conflicting claims", i, a, x.current(), b, y.current())
				}
			}
		}
		g.mu.Unlock()
	}
}

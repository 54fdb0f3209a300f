package hostclaims

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// claims builds a unit's claims of ports.
func claims(unit string, ps ...string) *Claims {
	return &Claims{Unit: unit, Ports: ports(ps...)}
}

func TestResolve(t *testing.T) {
	type want struct {
		outcome   Outcome
		conflicts string // the conflicts' strings joined with "; "
	}
	tests := []struct {
		name  string
		units []UnitRevisions
		want  map[string]want
	}{
		{
			name: "nothing changed, no conflicts",
			units: []UnitRevisions{
				{Unit: "a/0", Order: 1, Current: claims("a/0", "80/tcp")},
				{Unit: "b/0", Order: 2, Current: claims("b/0", "81/tcp")},
			},
			want: map[string]want{"a/0": {Kept, ""}, "b/0": {Kept, ""}},
		},
		{
			name: "a pair: the changed unit is rolled back",
			units: []UnitRevisions{
				{Unit: "kv/0", Order: 1, Current: claims("kv/0", "8080/tcp")},
				{Unit: "web/0", Order: 2, Current: claims("web/0", "8080/tcp", "443/tcp"), Changed: true, Previous: claims("web/0", "443/tcp")},
			},
			want: map[string]want{
				"kv/0":  {Kept, ""},
				"web/0": {RolledBack, "port 8080/tcp is claimed by kv/0"},
			},
		},
		{
			name: "a chain of three: the most conflicted is rolled back",
			units: []UnitRevisions{
				{Unit: "a/0", Order: 1, Current: claims("a/0", "80/tcp"), Changed: true, Previous: claims("a/0")},
				{Unit: "b/0", Order: 2, Current: claims("b/0", "80/tcp", "81/tcp"), Changed: true, Previous: claims("b/0")},
				{Unit: "c/0", Order: 3, Current: claims("c/0", "81/tcp"), Changed: true, Previous: claims("c/0")},
			},
			want: map[string]want{
				"a/0": {Kept, ""},
				"b/0": {RolledBack, "port 80/tcp is claimed by a/0; port 81/tcp is claimed by c/0"},
				"c/0": {Kept, ""},
			},
		},
		{
			name: "a longer chain: most conflicted first, then again",
			units: []UnitRevisions{
				{Unit: "a/0", Current: claims("a/0", "1/tcp"), Changed: true, Previous: claims("a/0")},
				{Unit: "b/0", Current: claims("b/0", "1/tcp", "2/tcp", "3/tcp"), Changed: true, Previous: claims("b/0")},
				{Unit: "c/0", Current: claims("c/0", "2/tcp", "4/tcp"), Changed: true, Previous: claims("c/0")},
				{Unit: "d/0", Current: claims("d/0", "3/tcp", "4/tcp", "5/tcp"), Changed: true, Previous: claims("d/0")},
				{Unit: "e/0", Current: claims("e/0", "5/tcp")},
			},
			// b has 3, d has 3: b (lower name) goes; then d has 2 (c, e),
			// c has 1: d goes.
			want: map[string]want{
				"a/0": {Kept, ""},
				"b/0": {RolledBack, "port 1/tcp is claimed by a/0; port 2/tcp is claimed by c/0; port 3/tcp is claimed by d/0"},
				"c/0": {Kept, ""},
				"d/0": {RolledBack, "port 4/tcp is claimed by c/0; port 5/tcp is claimed by e/0"},
				"e/0": {Kept, ""},
			},
		},
		{
			name: "a tie goes to the lowest unit name",
			units: []UnitRevisions{
				{Unit: "b/0", Order: 1, Current: claims("b/0", "80/tcp"), Changed: true, Previous: claims("b/0")},
				{Unit: "a/1", Order: 2, Current: claims("a/1", "80/tcp"), Changed: true, Previous: claims("a/1")},
			},
			want: map[string]want{
				"a/1": {RolledBack, "port 80/tcp is claimed by b/0"},
				"b/0": {Kept, ""},
			},
		},
		{
			name: "unchanged conflicts hold the later-assigned unit",
			units: []UnitRevisions{
				{Unit: "z/0", Order: 1, Current: claims("z/0", "80/tcp")},
				{Unit: "a/0", Order: 2, Current: claims("a/0", "80/tcp")},
				{Unit: "m/0", Order: 3, Current: claims("m/0", "81/tcp")},
			},
			want: map[string]want{
				"a/0": {Held, "port 80/tcp is claimed by z/0"},
				"m/0": {Kept, ""},
				"z/0": {Kept, ""},
			},
		},
		{
			name: "a rollback that still conflicts is held when assigned later",
			units: []UnitRevisions{
				{Unit: "a/0", Order: 1, Current: claims("a/0", "80/tcp")},
				{Unit: "b/0", Order: 2, Current: claims("b/0", "80/tcp", "81/tcp"), Changed: true, Previous: claims("b/0", "80/tcp")},
			},
			want: map[string]want{
				"a/0": {Kept, ""},
				"b/0": {Held, "port 80/tcp is claimed by a/0"},
			},
		},
		{
			name: "a new unit rolled back claims nothing",
			units: []UnitRevisions{
				{Unit: "a/0", Order: 1, Current: claims("a/0", "80/tcp")},
				{Unit: "b/0", Order: 2, Current: claims("b/0", "80/tcp"), Changed: true},
			},
			want: map[string]want{
				"a/0": {Kept, ""},
				"b/0": {RolledBack, "port 80/tcp is claimed by a/0"},
			},
		},
		{
			name: "a changed unit is rolled back before an unchanged one is held",
			units: []UnitRevisions{
				{Unit: "a/0", Order: 1, Current: claims("a/0", "80/tcp")},
				{Unit: "b/0", Order: 2, Current: claims("b/0", "80/tcp")},
				{Unit: "c/0", Order: 3, Current: claims("c/0", "80/tcp"), Changed: true, Previous: claims("c/0")},
			},
			want: map[string]want{
				"a/0": {Kept, ""},
				"b/0": {Held, "port 80/tcp is claimed by a/0"},
				"c/0": {RolledBack, "port 80/tcp is claimed by a/0; port 80/tcp is claimed by b/0"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Resolve(tt.units)
			if len(res.Units) != len(tt.want) {
				t.Fatalf("Resolve = %d units, want %d", len(res.Units), len(tt.want))
			}
			for unit, w := range tt.want {
				r, ok := res.Result(unit)
				if !ok {
					t.Fatalf("Resolve has no result for %s", unit)
				}
				got := strings.Join(conflictStrings(r.Conflicts), "; ")
				if r.Outcome != w.outcome || got != w.conflicts {
					t.Errorf("Resolve: %s %s (%s), want %s (%s)", unit, r.Outcome, got, w.outcome, w.conflicts)
				}
			}
			checkResolution(t, tt.units, res)
		})
	}
}

// checkResolution checks what every resolution satisfies: no two claims
// left conflict; a unit kept holds its current claims, one rolled back
// was changed and holds its previous ones, one held holds none; a unit
// not kept had a conflict.
func checkResolution(t *testing.T, units []UnitRevisions, res Resolution) {
	t.Helper()
	if !slices.IsSortedFunc(res.Units, func(a, b UnitResult) int { return strings.Compare(a.Unit, b.Unit) }) {
		t.Fatalf("Resolve units not sorted by name")
	}
	for i, a := range res.Units {
		for _, b := range res.Units[i+1:] {
			if cs := Conflicts(a.Claims, b.Claims); len(cs) > 0 {
				t.Fatalf("Resolve left %s and %s in conflict: %q", a.Unit, b.Unit, conflictStrings(cs))
			}
		}
	}
	for _, u := range units {
		r, ok := res.Result(u.Unit)
		if !ok {
			t.Fatalf("Resolve has no result for %s", u.Unit)
		}
		switch r.Outcome {
		case Kept:
			if r.Claims != u.Current || len(r.Conflicts) > 0 {
				t.Fatalf("%s kept with other claims or conflicts %q", u.Unit, conflictStrings(r.Conflicts))
			}
		case RolledBack:
			if !u.Changed || r.Claims != u.Previous {
				t.Fatalf("%s rolled back: changed %v, claims %p, previous %p", u.Unit, u.Changed, r.Claims, u.Previous)
			}
		case Held:
			if r.Claims != nil {
				t.Fatalf("%s held with claims", u.Unit)
			}
		default:
			t.Fatalf("%s has outcome %v", u.Unit, r.Outcome)
		}
		if r.Outcome != Kept && len(r.Conflicts) == 0 {
			t.Fatalf("%s %s without a conflict", u.Unit, r.Outcome)
		}
	}
}

// randomClaims draws claims from a small pool, so that units often meet.
func randomClaims(rng *rand.Rand, unit string) *Claims {
	c := &Claims{Unit: unit}
	for range rng.IntN(3) {
		from := 1 + rng.IntN(8)
		c.Ports = append(c.Ports, ports(fmt.Sprintf("%d-%d/%s", from, from+rng.IntN(2), []string{"tcp", "udp"}[rng.IntN(2)]))...)
	}
	paths := map[string]bool{}
	for range rng.IntN(3) {
		p := fmt.Sprintf("/etc/f%d", rng.IntN(4))
		if !paths[p] {
			paths[p] = true
			c.Files = append(c.Files, File{Path: p, Content: []byte{byte('a' + rng.IntN(2))}, Mode: []fs.FileMode{0o644, 0o600}[rng.IntN(2)]})
		}
	}
	names := map[string]bool{}
	for range rng.IntN(3) {
		n := fmt.Sprintf("p%d", rng.IntN(4))
		if !names[n] {
			names[n] = true
			c.Packages = append(c.Packages, Package{Name: n, Version: []string{"", "1", "2"}[rng.IntN(3)]})
		}
	}
	return c
}

func TestResolveRandom(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range 2000 {
		var units []UnitRevisions
		for i := range 2 + rng.IntN(7) {
			name := fmt.Sprintf("u%d/0", rng.IntN(100)*10+i)
			u := UnitRevisions{Unit: name, Order: int64(rng.IntN(5)), Current: randomClaims(rng, name)}
			switch rng.IntN(3) {
			case 0:
				u.Changed, u.Previous = true, randomClaims(rng, name)
			case 1:
				u.Changed = rng.IntN(4) == 0 // sometimes a new unit
			}
			units = append(units, u)
		}
		res := Resolve(units)
		checkResolution(t, units, res)
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
}

package manifest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestOrderRandom builds random dependency graphs: without a cycle, Order
// puts every resource after its dependencies and keeps the file's order
// otherwise; with an edge closing a cycle, Order refuses it and names a
// cycle whose every step is a dependency.
func TestOrderRandom(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range 200 {
		n := 1 + rng.IntN(30)
		var src strings.Builder
		src.WriteString("name: r\nresources:\n")
		deps := make([][]int, n)
		// Resource i depends only on resources after it in a random
		// permutation: no cycle.
		perm := rng.Perm(n)
		rank := make([]int, n)
		for i, p := range perm {
			rank[p] = i
		}
		for i := range n {
			for j := range n {
				if rank[j] < rank[i] && rng.IntN(4) == 0 {
					deps[i] = append(deps[i], j)
				}
			}
		}
		cycle := n > 1 && rng.IntN(3) == 0
		if cycle {
			// An edge against the permutation closes a cycle when the
			// reverse path exists: make it exist.
			a, b := perm[0], perm[n-1] // rank 0 and rank n-1
			deps[b] = append(deps[b], a)
			deps[a] = append(deps[a], b)
		}
		for i := range n {
			fmt.Fprintf(&src, "  r%d:\n    type: machine\n    dependencies: {", i)
			for k, j := range deps[i] {
				if k > 0 {
					src.WriteString(", ")
				}
				fmt.Fprintf(&src, "d%d: r%d", k, j)
			}
			src.WriteString("}\n")
		}
		m, err := Parse([]byte(src.String()), ".")
		if err != nil {
			t.Fatalf("seed %d round %d: Parse: %v\n%s", seed, round, err, src.String())
		}
		order, err := m.Order()
		if cycle {
			if err == nil {
				t.Fatalf("seed %d round %d: Order of a graph with a cycle = %v", seed, round, order)
			}
			for _, p := range problems(t, err) {
				steps := strings.Split(strings.TrimPrefix(p, "dependency cycle: "), " → ")
				if steps[0] != steps[len(steps)-1] {
					t.Fatalf("seed %d round %d: %q does not close", seed, round, p)
				}
				for k := 0; k+1 < len(steps); k++ {
					if !slices.Contains(mapValues(m.Resources[steps[k]].Dependencies), steps[k+1]) {
						t.Fatalf("seed %d round %d: %q: %s does not depend on %s", seed, round, p, steps[k], steps[k+1])
					}
				}
			}
			continue
		}
		if err != nil {
			t.Fatalf("seed %d round %d: Order: %v\n%s", seed, round, err, src.String())
		}
		pos := map[string]int{}
		for i, name := range order {
			pos[name] = i
		}
		if len(order) != n {
			t.Fatalf("seed %d round %d: Order = %v, want %d resources", seed, round, order, n)
		}
		for i := range n {
			for _, j := range deps[i] {
				if pos[fmt.Sprintf("r%d", j)] > pos[fmt.Sprintf("r%d", i)] {
					t.Fatalf("seed %d round %d: r%d before its dependency r%d in %v", seed, round, i, j, order)
				}
			}
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// FuzzParse: whatever the file, Parse does not panic, and every problem
// it lists is one line.
func FuzzParse(f *testing.F) {
	f.Add([]byte(demo))
	f.Add([]byte("name: a\nresources:\n  x: {type: 'exec:./p', plugs: {z: {path: q}}}\n"))
	f.Add([]byte("name: a\nvariables: &v {a: *v}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse(data, ".")
		if err == nil {
			return
		}
		for _, p := range problems(t, err) {
			if strings.Contains(p, "\n") {
				t.Errorf("problem %q is more than one line", p)
			}
		}
	})
}

package hostclaims

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
)

// sample returns claims of two packages, two files and two daemons.
func sample() *Claims {
	return &Claims{
		Unit:     "kv/0",
		Ports:    []charm.PortRange{{From: 8080, To: 8080, Protocol: "tcp"}},
		Packages: []Package{{Name: "nginx"}, {Name: "kv-server", Version: "1.2"}},
		Files: []File{
			{Path: "/etc/kv/a.conf", Content: []byte("a"), Mode: 0o644},
			{Path: "/etc/kv/b.conf", Content: []byte("b"), Mode: 0o644},
		},
		Daemons: []Daemon{
			{Name: "server", Command: []string{"kv", "--port", "8080"}, Env: map[string]string{"A": "1"}, StopTimeout: time.Second},
			{Name: "metrics", Command: []string{"metrics"}, StopTimeout: time.Second},
		},
	}
}

func taskStrings(tasks []Task) []string {
	out := []string{}
	for _, t := range tasks {
		out = append(out, t.String())
	}
	return out
}

func TestJob(t *testing.T) {
	c := sample()
	cur := taskStrings(Job(Current, c))
	wantCur := []string{"install package:nginx", "install package:kv-server", "manage file:/etc/kv/a.conf", "manage file:/etc/kv/b.conf", "run daemon:server", "run daemon:metrics"}
	if !slices.Equal(cur, wantCur) {
		t.Errorf("Job(Current) = %q, want %q", cur, wantCur)
	}
	rem := taskStrings(Job(Removed, c))
	wantRem := []string{"shutdown daemon:metrics", "shutdown daemon:server", "remove file:/etc/kv/b.conf", "remove file:/etc/kv/a.conf", "uninstall package:kv-server", "uninstall package:nginx"}
	if !slices.Equal(rem, wantRem) {
		t.Errorf("Job(Removed) = %q, want %q", rem, wantRem)
	}
	if got := Job(Current, nil); len(got) != 0 {
		t.Errorf("Job(Current, nil) = %q, want none", taskStrings(got))
	}
}

func TestDigest(t *testing.T) {
	d := func(mod func(*Claims)) []string {
		c := sample()
		mod(c)
		var out []string
		for _, t := range Job(Current, c) {
			out = append(out, t.Digest())
		}
		return out
	}
	base := d(func(*Claims) {})
	if again := d(func(*Claims) {}); !slices.Equal(base, again) {
		t.Fatalf("Digest differs between equal claims")
	}
	changes := map[string]func(*Claims){
		"package version": func(c *Claims) { c.Packages[0].Version = "1" },
		"file content":    func(c *Claims) { c.Files[0].Content = []byte("x") },
		"file mode":       func(c *Claims) { c.Files[0].Mode = 0o600 },
		"daemon command":  func(c *Claims) { c.Daemons[0].Command = []string{"kv", "--port8080"} },
		"daemon env":      func(c *Claims) { c.Daemons[0].Env = map[string]string{"A": "2"} },
		"daemon env key":  func(c *Claims) { c.Daemons[0].Env = map[string]string{"A1": ""} },
		"stop-timeout":    func(c *Claims) { c.Daemons[0].StopTimeout = 2 * time.Second },
	}
	for name, mod := range changes {
		got := d(mod)
		diff := 0
		for i := range got {
			if got[i] != base[i] {
				diff++
			}
		}
		if diff != 1 {
			t.Errorf("%s: %d digests changed, want 1", name, diff)
		}
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name             string
		old, new         func() *Claims
		removed, current []string
		pruned           int
	}{
		{
			name:    "new unit",
			old:     func() *Claims { return nil },
			new:     sample,
			current: taskStrings(Job(Current, sample())),
		},
		{
			name:   "unchanged",
			old:    sample,
			new:    sample,
			pruned: 12,
		},
		{
			name:    "dying unit",
			old:     sample,
			new:     func() *Claims { return nil },
			removed: taskStrings(Job(Removed, sample())),
		},
		{
			name: "a changed file is rewritten only",
			old:  sample,
			new: func() *Claims {
				c := sample()
				c.Files[1].Content = []byte("b2")
				return c
			},
			current: []string{"manage file:/etc/kv/b.conf"},
			pruned:  11,
		},
		{
			name: "a changed daemon is run again, not shut down first",
			old:  sample,
			new: func() *Claims {
				c := sample()
				c.Daemons[1].Env = map[string]string{"X": "1"}
				return c
			},
			current: []string{"run daemon:metrics"},
			pruned:  11,
		},
		{
			name: "resources dropped and added",
			old:  sample,
			new: func() *Claims {
				c := sample()
				c.Files = c.Files[:1]
				c.Daemons = c.Daemons[1:]
				c.Packages = append(c.Packages, Package{Name: "curl"})
				return c
			},
			removed: []string{"shutdown daemon:server", "remove file:/etc/kv/b.conf"},
			current: []string{"install package:curl"},
			pruned:  8,
		},
		{
			name: "a package at another version is installed over",
			old:  sample,
			new: func() *Claims {
				c := sample()
				c.Packages[1].Version = "1.3"
				return c
			},
			current: []string{"install package:kv-server"},
			pruned:  11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := tt.old(), tt.new()
			removed, current, pruned := Diff(old, new)
			if got := taskStrings(removed); !reflect.DeepEqual(got, append([]string{}, tt.removed...)) {
				t.Errorf("Diff removed = %q, want %q", got, tt.removed)
			}
			if got := taskStrings(current); !reflect.DeepEqual(got, append([]string{}, tt.current...)) {
				t.Errorf("Diff current = %q, want %q", got, tt.current)
			}
			if pruned != tt.pruned {
				t.Errorf("Diff pruned = %d, want %d", pruned, tt.pruned)
			}
			if total := len(Job(Removed, old)) + len(Job(Current, new)); len(removed)+len(current)+pruned != total {
				t.Errorf("Diff: %d+%d+%d tasks, want %d", len(removed), len(current), pruned, total)
			}
		})
	}
}

// randomJobClaims draws claims with packages, files and daemons from a
// small pool, so that two draws share some resources and differ on others.
func randomJobClaims(rng *rand.Rand) *Claims {
	if rng.IntN(8) == 0 {
		return nil
	}
	c := randomClaims(rng, "u/0")
	for i := range rng.IntN(3) {
		c.Daemons = append(c.Daemons, Daemon{Name: fmt.Sprintf("d%d", i), Command: []string{"run", strconv.Itoa(rng.IntN(2))}, StopTimeout: time.Second})
	}
	return c
}

// TestDiffRandom applies Diff's tasks to a host holding the old claims'
// resources (resource ID → digest) and checks that it then holds exactly
// the new ones, with no task run for a resource already as wanted.
func TestDiffRandom(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	held := func(c *Claims) map[string]string {
		m := map[string]string{}
		for _, t := range Job(Current, c) {
			m[t.ID()] = t.Digest()
		}
		return m
	}
	for range 5000 {
		old, new := randomJobClaims(rng), randomJobClaims(rng)
		host := held(old)
		before := maps.Clone(host)
		removed, current, pruned := Diff(old, new)
		for _, task := range removed {
			if task.Kind < Uninstall {
				t.Fatalf("Diff removed holds %s", task)
			}
			delete(host, task.ID())
		}
		for _, task := range current {
			if task.Kind > Run {
				t.Fatalf("Diff current holds %s", task)
			}
			if before[task.ID()] == task.Digest() {
				t.Fatalf("Diff runs %s, already as wanted", task)
			}
			host[task.ID()] = task.Digest()
		}
		if want := held(new); !maps.Equal(host, want) {
			t.Fatalf("after Diff(%+v, %+v) the host holds %v, want %v", old, new, host, want)
		}
		if len(removed)+len(current)+pruned != len(Job(Removed, old))+len(Job(Current, new)) {
			t.Fatalf("Diff's counts do not add up")
		}
	}
}

package unitagent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/lifelinehq/lifeline/internal/hostclaims"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// refusingGate is a machine's gate in memory: while refuse is set, it
// rolls every ask back for a port another unit holds; it counts the asks
// and keeps what each unit told it holds.
type refusingGate struct {
	mu     sync.Mutex
	refuse bool
	asks   int
	held   map[string]*hostclaims.Claims
}

func (g *refusingGate) Check(ctx context.Context, unit string, claims *hostclaims.Claims) (hostclaims.UnitResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asks++
	if !g.refuse {
		return hostclaims.UnitResult{Unit: unit, Outcome: hostclaims.Kept, Claims: claims}, nil
	}
	return hostclaims.UnitResult{Unit: unit, Outcome: hostclaims.RolledBack, Conflicts: []hostclaims.Conflict{
		{Resource: "port 8080/tcp", Other: "other/0"}, {Resource: "file /x", Other: "other/0", Detail: "with other content"},
	}}, nil
}

func (g *refusingGate) Holds(unit string, claims *hostclaims.Claims) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[unit] = claims
}

func (g *refusingGate) set(refuse bool) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse = refuse
	return g.asks
}

// TestRefusedClaimsKeepTheRevision: a move whose claims the machine's gate
// refuses runs no task and no hook: the unit keeps its revision, files and
// daemons, and shows error with the conflict; ctl resolved asks again,
// and, allowed, the unit moves. A change that leaves the claims as they
// are does not ask.
func TestRefusedClaimsKeepTheRevision(t *testing.T) {
	w := newWorld(t)
	h := w.withHost()
	gate := &refusingGate{held: map[string]*hostclaims.Claims{}}
	w.gate = gate
	dir := writeCharm(t, claimsMeta, "server")
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("options:\n  colour:\n    type: string\n    default: red\n  other:\n    type: string\n    default: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	w.start("kv/0")
	w.waitState("kv/0", "running")
	w.waitRevision("kv/0", 1)
	before := pids(h, "kv/0")
	hooks := len(w.hooks("kv/0"))
	colour := filepath.Join(w.dir("kv/0"), "colour.conf")

	asks := gate.set(true)
	w.setColour("blue")
	w.grant("kv", "kv/0")
	const want = "conflict: port 8080/tcp is claimed by other/0 (and 1 more): kept revision 1"
	w.waitFor("kv/0 in error with the conflict", func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.Agent == "error" && s.AgentMessage == want
	})
	if ur := w.unitRevision("kv/0"); ur.Current != 1 {
		t.Errorf("kv/0 refused: on revision %d, want 1", ur.Current)
	}
	if b, _ := os.ReadFile(colour); string(b) != "colour=red\n" {
		t.Errorf("colour.conf holds %q after the refusal, want red", b)
	}
	if got := pids(h, "kv/0"); got["painted"] != before["painted"] || got["plain"] != before["plain"] {
		t.Errorf("daemons %v after the refusal, were %v", got, before)
	}
	if got := w.hooks("kv/0"); len(got) != hooks {
		t.Errorf("hooks ran after the refusal: %q", got[hooks:])
	}

	gate.set(false)
	if _, err := w.op.Resolved(w.env.Ctx, &pb.ResolvedRequest{Unit: "kv/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitRevision("kv/0", w.target("kv"))
	w.waitState("kv/0", "running")
	if b, _ := os.ReadFile(colour); string(b) != "colour=blue\n" {
		t.Errorf("colour.conf holds %q once allowed, want blue", b)
	}
	if n := gate.set(false); n != asks+2 {
		t.Errorf("the gate was asked %d times for the move, want 2 (refused, then resolved)", n-asks)
	}

	// An option no claim uses: nothing new to ask about.
	asks = gate.set(false)
	if _, err := w.op.SetConfig(w.env.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"other": "y"}}); err != nil {
		t.Fatal(err)
	}
	w.grant("kv", "kv/0")
	w.waitRevision("kv/0", w.target("kv"))
	if n := gate.set(false); n != asks {
		t.Errorf("the gate was asked %d times for a move that keeps the claims, want none", n-asks)
	}
	gate.mu.Lock()
	held := gate.held["kv/0"]
	gate.mu.Unlock()
	if held == nil || len(held.Files) != 2 {
		t.Errorf("the gate holds %+v for kv/0, want its two files", held)
	}
}

// TestOpenedPortsToldToTheGate: the ports a hook opened are the unit's
// claims: once the hook succeeded, its machine's gate holds them, and a
// port closed goes from them.
func TestOpenedPortsToldToTheGate(t *testing.T) {
	w := newWorld(t)
	gate := &refusingGate{held: map[string]*hostclaims.Claims{}}
	w.gate = gate
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "probe-install", "open-port 8080 && open-port 9000-9010/udp && opened-ports")
	heldPorts := func() []string {
		gate.mu.Lock()
		defer gate.mu.Unlock()
		var out []string
		if c := gate.held["kv/0"]; c != nil {
			for _, p := range c.Ports {
				out = append(out, p.String())
			}
		}
		return out
	}
	w.start("kv/0")
	poll.UntilSays(t, "the gate holding kv/0's opened ports", func() (bool, string) {
		got := heldPorts()
		return slices.Equal(got, []string{"8080/tcp", "9000-9010/udp"}), fmt.Sprintf("held %q, opened-ports logged %q, hooks %q", got, w.lines("kv/0", "probe.log"), w.hooks("kv/0"))
	})
	// The first config-changed (after install) must not close the port,
	// so the closing probe is written only once the unit has started.
	w.waitState("kv/0", "running")
	w.file("kv/0", "probe-config-changed", "close-port 8080")
	w.setColour("blue")
	w.grant("kv", "kv/0")
	w.waitFor("the gate holding kv/0's ports but the one closed", func() bool {
		return slices.Equal(heldPorts(), []string{"9000-9010/udp"})
	})
}

package machineagent

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestGateStanding: two units that hold conflicting claims, neither
// asking, are weighed as a pass would: the later one is held, and Standing
// says why; Changed tells each change of the record, and once the earlier
// unit goes the later one is held no more.
func TestGateStanding(t *testing.T) {
	g := openGate(t.TempDir(), time.Millisecond, hclog.NewNullLogger())
	g.see("z/0")
	g.see("a/0")
	g.Holds("z/0", ports(8080))
	changed := g.Changed()
	g.Holds("a/0", ports(8080, 9090))
	select {
	case <-changed:
	default:
		t.Error("Changed's channel is open after a unit told other claims")
	}
	if got, want := g.Standing("a/0"), []string{"held: port 8080/tcp is claimed by z/0"}; !slices.Equal(got, want) {
		t.Errorf("Standing(a/0) = %q, want %q", got, want)
	}
	if got := g.Standing("z/0"); got != nil {
		t.Errorf("Standing(z/0) = %q, want none: it came first", got)
	}
	if got := g.Standing("nobody/0"); got != nil {
		t.Errorf("Standing(nobody/0) = %q, want none", got)
	}
	changed = g.Changed()
	g.Holds("a/0", ports(8080, 9090)) // the same claims: no change
	select {
	case <-changed:
		t.Error("Changed's channel closed, though the claims told were those recorded")
	default:
	}
	g.forget("z/0")
	select {
	case <-changed:
	default:
		t.Error("Changed's channel is open after a unit was forgotten")
	}
	if got := g.Standing("a/0"); got != nil {
		t.Errorf("Standing(a/0) = %q once z/0 went, want none", got)
	}
}

// The gate tells standing conflicts to the unit agents' host reports
// (unitagent's standingGate, matched by its methods).
var _ interface {
	Standing(unit string) []string
	Changed() <-chan struct{}
} = (*claimsGate)(nil)

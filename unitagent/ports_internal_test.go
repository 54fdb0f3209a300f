package unitagent

import (
	"slices"
	"testing"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostclaims"
)

// TestPortClaims: a unit's port claims are its charm's and those its
// hooks opened, each once, sorted; what the machine's conflict check
// compares carries them.
func TestPortClaims(t *testing.T) {
	l := newLocalState()
	l.OpenedPorts = []string{"9000-9010/udp", "8080/tcp", "443/tcp"}
	declared := []charm.PortRange{{From: 8080, To: 8080, Protocol: charm.TCP}, {From: 53, To: 53, Protocol: charm.UDP}}
	var got []string
	for _, p := range l.portClaims(declared) {
		got = append(got, p.String())
	}
	if want := []string{"443/tcp", "8080/tcp", "53/udp", "9000-9010/udp"}; !slices.Equal(got, want) {
		t.Errorf("portClaims = %q, want %q", got, want)
	}
	c := &hostclaims.Claims{Unit: "kv/0", Ports: declared, Packages: []hostclaims.Package{{Name: "jq"}}}
	with := l.withPortClaims(c)
	if len(with.Ports) != 4 || with.Unit != "kv/0" || len(with.Packages) != 1 || len(c.Ports) != 2 {
		t.Errorf("withPortClaims = %+v (of %+v), want the claims with 4 ports, the original untouched", with, c)
	}
	if got := newLocalState().withPortClaims(nil); len(got.Ports) != 0 {
		t.Errorf("withPortClaims(nil) of a unit without ports = %+v", got)
	}
}

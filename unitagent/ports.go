package unitagent

import (
	"context"
	"slices"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostclaims"
)

// The unit's opened ports (open-port, close-port, opened-ports) are its
// port claims made at run time, beside those its charm declares: kept in
// its local state (localState.OpenedPorts, "8080/tcp" strings), changed by
// a hook only if it succeeds, as its relation-set calls are (the hook's
// ports travel with it, hookOp.Ports, until it is recorded done), reported
// with its claims (hostreport.go) and counted by its machine's conflict
// check (portClaims).

// portsChange is a successful hook's opened ports, all of them, kept with
// the hook until it is recorded done.
type portsChange struct {
	Opened []string `json:"opened"`
}

// openedPorts returns the unit's opened ports; a record that does not
// parse (none is written so) is passed over.
func (l *localState) openedPorts() []charm.PortRange {
	out := make([]charm.PortRange, 0, len(l.OpenedPorts))
	for _, s := range l.OpenedPorts {
		if p, err := charm.ParsePort(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// portClaims returns the unit's port claims: declared (its charm's
// host.ports, as rendered) and those its hooks opened, each once, sorted
// by protocol and port. The machine's conflict check counts these.
func (l *localState) portClaims(declared []charm.PortRange) []charm.PortRange {
	out := slices.Clone(declared)
	for _, p := range l.openedPorts() {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	hooks.SortPorts(out)
	return out
}

// withPortClaims returns a copy of c whose ports are the unit's port
// claims (portClaims): the claims the machine's conflict check compares.
func (l *localState) withPortClaims(c *hostclaims.Claims) *hostclaims.Claims {
	if c == nil {
		c = &hostclaims.Claims{}
	}
	out := *c
	out.Ports = l.portClaims(c.Ports)
	return &out
}

// OpenPort opens p for the rest of the hook, and for the unit once the
// hook succeeds.
func (hc *hookContext) OpenPort(_ context.Context, p charm.PortRange) error {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	ps, err := hooks.OpenPortIn(hc.opened, p)
	if err != nil {
		return err
	}
	hc.opened, hc.portsSet = ps, hc.portsSet || len(ps) != len(hc.opened)
	return nil
}

// ClosePort closes p, as OpenPort opens it.
func (hc *hookContext) ClosePort(_ context.Context, p charm.PortRange) error {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	ps, err := hooks.ClosePortIn(hc.opened, p)
	if err != nil {
		return err
	}
	hc.opened, hc.portsSet = ps, hc.portsSet || len(ps) != len(hc.opened)
	return nil
}

// OpenedPorts returns the unit's opened ports with the hook's changes.
func (hc *hookContext) OpenedPorts(context.Context) ([]charm.PortRange, error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return slices.Clone(hc.opened), nil
}

// portsChange returns the hook's opened ports once it succeeded, nil
// when it changed none.
func (hc *hookContext) portsChange() *portsChange {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if !hc.portsSet {
		return nil
	}
	c := &portsChange{Opened: make([]string, 0, len(hc.opened))}
	for _, p := range hc.opened {
		c.Opened = append(c.Opened, p.String())
	}
	return c
}

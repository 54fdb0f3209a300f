package hooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lifelinehq/lifeline/internal/charm"
)

// PortContext is the Context of a hook whose unit may open and close
// ports on its host, as Juju's open-port and close-port do: the ports
// opened are the unit's port claims made at run time, beside those its
// charm declares (metadata.yaml's host.ports), checked for conflicts
// with the other units of its machine as those are. A unit agent's hooks
// have one; an action's has not (the tools then fail).
type PortContext interface {
	Context
	// OpenPort and ClosePort change the unit's opened ports, as seen by
	// the rest of the hook at once and kept only if the hook succeeds
	// (as relation-set's changes are). Opening a port already open and
	// closing one that is not are no-ops; a range that overlaps another
	// opened range without being it is refused, as is a port past
	// MaxOpenedPorts.
	OpenPort(ctx context.Context, p charm.PortRange) error
	ClosePort(ctx context.Context, p charm.PortRange) error
	// OpenedPorts returns the unit's opened ports, with this hook's
	// changes.
	OpenedPorts(ctx context.Context) ([]charm.PortRange, error)
}

// MaxOpenedPorts bounds the ports a unit has open at once with open-port,
// as charm.MaxHostPorts bounds those its charm declares.
const MaxOpenedPorts = charm.MaxHostPorts

// errNoPorts is what the port tools say outside a hook.
var errNoPorts = errors.New("not running a hook: only a unit's hooks may open or close its ports")

// portTools returns open-port, close-port and opened-ports.
func portTools() map[string]tool {
	return map[string]tool{
		"open-port": {
			usage: "PORT[/PROTOCOL] | FROM-TO[/PROTOCOL]",
			doc: `Opens a port or a range of ports for this unit: a claim on its
host, as its charm's host.ports are, checked against the other units of
its machine. PROTOCOL is tcp (the default) or udp; icmp has no port to
claim and is refused. The change is kept only if the hook succeeds.
Opening a port open already does nothing; a range overlapping another
opened one must be closed first. At most 64 are open at once.`,
			run: (*call).openPort,
		},
		"close-port": {
			usage: "PORT[/PROTOCOL] | FROM-TO[/PROTOCOL]",
			doc: `Closes a port or a range of ports open-port opened, as it was
opened. The change is kept only if the hook succeeds; closing a port
that is not open does nothing.`,
			run: (*call).closePort,
		},
		"opened-ports": {
			usage: "[--format=text|json]",
			doc: `Prints the ports this unit opened with open-port, one a line
("8080/tcp", "9000-9010/udp"), sorted by protocol and port, with this
hook's changes; a json array of the same strings in json.`,
			flags: []string{"format"},
			run:   (*call).openedPorts,
		},
	}
}

// ParseToolPort parses open-port's and close-port's argument:
// "PORT[/PROTOCOL]" or "FROM-TO[/PROTOCOL]", tcp when no protocol is
// given.
func ParseToolPort(s string) (charm.PortRange, error) {
	spec, proto, hasProto := strings.Cut(s, "/")
	proto = strings.ToLower(proto)
	if strings.EqualFold(spec, "icmp") || proto == "icmp" {
		return charm.PortRange{}, fmt.Errorf("%q: icmp is not supported: a port claim is a tcp or udp port on the host, which icmp has none of", s)
	}
	if !hasProto {
		proto = charm.TCP
	}
	return charm.ParsePort(spec + "/" + proto)
}

// ports returns the call's PortContext, or errNoPorts.
func (c *call) ports() (PortContext, error) {
	pc, ok := c.hc.(PortContext)
	if !ok {
		return nil, errNoPorts
	}
	return pc, nil
}

// portArg checks that the call has one argument, a port or range.
func (c *call) portArg() (charm.PortRange, error) {
	if err := c.want(1, 1); err != nil {
		return charm.PortRange{}, usagef("name one port or range: PORT[/PROTOCOL] or FROM-TO[/PROTOCOL]")
	}
	p, err := ParseToolPort(c.args[0])
	if err != nil {
		return charm.PortRange{}, usagef("%v", err)
	}
	return p, nil
}

func (c *call) openPort(ctx context.Context) error {
	p, err := c.portArg()
	if err != nil {
		return err
	}
	pc, err := c.ports()
	if err != nil {
		return err
	}
	return pc.OpenPort(ctx, p)
}

func (c *call) closePort(ctx context.Context) error {
	p, err := c.portArg()
	if err != nil {
		return err
	}
	pc, err := c.ports()
	if err != nil {
		return err
	}
	return pc.ClosePort(ctx, p)
}

func (c *call) openedPorts(ctx context.Context) error {
	if err := c.want(0, 0); err != nil {
		return err
	}
	pc, err := c.ports()
	if err != nil {
		return err
	}
	ps, err := pc.OpenedPorts(ctx)
	if err != nil {
		return err
	}
	ps = slices.Clone(ps)
	SortPorts(ps)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return c.printLines(out)
}

// SortPorts sorts ports by protocol, then first and last port.
func SortPorts(ps []charm.PortRange) {
	slices.SortFunc(ps, func(a, b charm.PortRange) int {
		return cmp.Or(strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
}

// OpenPortIn returns ps with p opened, as PortContext.OpenPort says: ps
// itself when p is open already; an error when p overlaps another range
// of ps, or ps holds MaxOpenedPorts already.
func OpenPortIn(ps []charm.PortRange, p charm.PortRange) ([]charm.PortRange, error) {
	for _, q := range ps {
		if q == p {
			return ps, nil
		}
	}
	for _, q := range ps {
		if q.Overlaps(p) {
			return nil, fmt.Errorf("cannot open %s: it overlaps %s, open already: close that first", p, q)
		}
	}
	if len(ps) >= MaxOpenedPorts {
		return nil, fmt.Errorf("cannot open %s: %d ports are open, at most %d", p, len(ps), MaxOpenedPorts)
	}
	return append(slices.Clone(ps), p), nil
}

// ClosePortIn returns ps without p: ps itself when p is not open; an
// error when p overlaps a range of ps without being it (a range is
// closed as it was opened).
func ClosePortIn(ps []charm.PortRange, p charm.PortRange) ([]charm.PortRange, error) {
	for i, q := range ps {
		if q == p {
			return slices.Delete(slices.Clone(ps), i, i+1), nil
		}
	}
	for _, q := range ps {
		if q.Overlaps(p) {
			return nil, fmt.Errorf("cannot close %s: %s is open: close it as it was opened", p, q)
		}
	}
	return ps, nil
}

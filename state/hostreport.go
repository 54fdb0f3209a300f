package state

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// host-reports/<unit> holds what a unit holds on its host through its host
// claims, as its agent last reported it (pb.HostReport): its claims as
// rendered, its last host job's tasks, its conflicts and its daemons. One
// record a unit, replaced by each report, deleted with the unit.
const hostReportsPrefix = "host-reports/"

// MaxHostReportBytes bounds a unit's host report, encoded: its claims
// (64 of each kind at most, charm.MaxHostPorts and friends), 200 tasks of
// its last job and its daemons, with their strings cut by the agent, fit
// with room to spare.
const MaxHostReportBytes = 128 << 10

// host-ports/<unit> holds the unit's port claims as its last host report
// gave them (pb.HostPorts): what status shows of every unit, kept apart
// from the report, which status does not read. Absent when the report
// gave none; written with the report when they change.
const hostPortsPrefix = "host-ports/"

// HostReportKey is the key of the named unit's host report.
func HostReportKey(unit string) string { return hostReportsPrefix + unit }

// HostPortsKey is the key of the named unit's port claims.
func HostPortsKey(unit string) string { return hostPortsPrefix + unit }

// SetHostReport replaces the named unit's host report with r, and its
// port claims (host-ports/<unit>) when they changed. The unit must exist
// (ErrNotFound): the transaction compares its key, so that neither
// outlives it (its removal deletes both). A report over
// MaxHostReportBytes is ErrInvalid.
func (s *State) SetHostReport(ctx context.Context, unit string, r *pb.HostReport) error {
	if err := checkUnitName(unit); err != nil {
		return err
	}
	if r == nil {
		return invalidf("host report of unit %s: no report", unit)
	}
	if n := proto.Size(r); n > MaxHostReportBytes {
		return invalidf("host report of unit %s is %s: at most %s", unit, sizeString(int64(n)), sizeString(MaxHostReportBytes))
	}
	ports := reportPorts(r)
	return s.apply(ctx, "report the host of unit "+unit, func(ctx context.Context) (*change, error) {
		res, err := s.read(ctx, getExists(UnitKey(unit)), get(HostPortsKey(unit)))
		if err != nil {
			return nil, err
		}
		if res.ranges[0].Count == 0 {
			return nil, notFoundf("unit %s not found", unit)
		}
		cur, err := decode[pb.HostPorts](res.one(1))
		if err != nil {
			return nil, err
		}
		c := &change{}
		c.ifExists(UnitKey(unit))
		c.put(HostReportKey(unit), r)
		switch {
		case cur == nil && len(ports) > 0:
			c.ifAbsent(HostPortsKey(unit))
			c.put(HostPortsKey(unit), &pb.HostPorts{Ports: ports})
		case cur != nil && len(ports) == 0:
			c.ifMod(HostPortsKey(unit), cur.mod)
			c.del(HostPortsKey(unit))
		case cur != nil && !slices.Equal(cur.v.Ports, ports):
			c.ifMod(HostPortsKey(unit), cur.mod)
			c.put(HostPortsKey(unit), &pb.HostPorts{Ports: ports})
		case cur == nil:
			// The report matches the ports as read: assert them, so that
			// a concurrent report's ports are not left beside this one.
			c.ifAbsent(HostPortsKey(unit))
		default:
			c.ifMod(HostPortsKey(unit), cur.mod)
		}
		return c, nil
	})
}

// reportPorts are the port claims of a report: those declared, then those
// opened that are not among them.
func reportPorts(r *pb.HostReport) []string {
	c := r.GetClaims()
	var out []string
	for _, p := range append(slices.Clone(c.GetPorts()), c.GetOpenedPorts()...) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// HostPorts returns the named unit's port claims as its last host report
// gave them: none before its first.
func (s *State) HostPorts(ctx context.Context, unit string) ([]string, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	res, err := s.read(ctx, get(HostPortsKey(unit)))
	if err != nil {
		return nil, err
	}
	p, err := decode[pb.HostPorts](res.one(0))
	if err != nil || p == nil {
		return nil, err
	}
	return p.v.Ports, nil
}

// HostReport returns the named unit's host report, nil when its agent has
// made none.
func (s *State) HostReport(ctx context.Context, unit string) (*pb.HostReport, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	res, err := s.read(ctx, get(HostReportKey(unit)))
	if err != nil {
		return nil, err
	}
	r, err := decode[pb.HostReport](res.one(0))
	if err != nil || r == nil {
		return nil, err
	}
	return r.v, nil
}

// checkHostReports checks that every host report decodes, is within its
// bound and belongs to a unit that exists, and that a unit's port claims
// are those of its report.
func checkHostReports(snap *Snapshot, bad func(string, ...any)) {
	for k, v := range snap.Values {
		switch {
		case strings.HasPrefix(k, hostReportsPrefix):
			unit := strings.TrimPrefix(k, hostReportsPrefix)
			if _, ok := snap.Values[UnitKey(unit)]; !ok {
				bad("%s outlives its unit", k)
			}
			if len(v) > MaxHostReportBytes {
				bad("%s is %d bytes: at most %d", k, len(v), MaxHostReportBytes)
			}
			r := &pb.HostReport{}
			if err := proto.Unmarshal(v, r); err != nil {
				bad("%s: not a host report: %v", k, err)
				continue
			}
			want := reportPorts(r)
			p := &pb.HostPorts{}
			pv, ok := snap.Values[HostPortsKey(unit)]
			if ok {
				if err := proto.Unmarshal(pv, p); err != nil {
					bad("%s: not a unit's ports: %v", HostPortsKey(unit), err)
					continue
				}
			}
			if !slices.Equal(p.Ports, want) || ok && len(want) == 0 {
				bad("%s holds %q, its host report %q", HostPortsKey(unit), p.Ports, want)
			}
		case strings.HasPrefix(k, hostPortsPrefix):
			if _, ok := snap.Values[HostReportKey(strings.TrimPrefix(k, hostPortsPrefix))]; !ok {
				bad("%s without its unit's host report", k)
			}
		}
	}
}

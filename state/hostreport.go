package state

import (
	"context"
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

// HostReportKey is the key of the named unit's host report.
func HostReportKey(unit string) string { return hostReportsPrefix + unit }

// SetHostReport replaces the named unit's host report with r. The unit
// must exist (ErrNotFound): the transaction compares its key, so that a
// report never outlives its unit (its removal deletes the report). A
// report over MaxHostReportBytes is ErrInvalid.
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
	c := &change{}
	c.ifExists(UnitKey(unit))
	c.put(HostReportKey(unit), r)
	ok, err := s.commit(ctx, c)
	if err != nil {
		return err
	}
	if !ok {
		return notFoundf("unit %s not found", unit)
	}
	return nil
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
// bound and belongs to a unit that exists.
func checkHostReports(snap *Snapshot, bad func(string, ...any)) {
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, hostReportsPrefix) {
			continue
		}
		unit := strings.TrimPrefix(k, hostReportsPrefix)
		if _, ok := snap.Values[UnitKey(unit)]; !ok {
			bad("%s outlives its unit", k)
		}
		if len(v) > MaxHostReportBytes {
			bad("%s is %d bytes: at most %d", k, len(v), MaxHostReportBytes)
		}
		if err := proto.Unmarshal(v, &pb.HostReport{}); err != nil {
			bad("%s: not a host report: %v", k, err)
		}
	}
}

package state

import (
	"context"
	"errors"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// StatusKind says which of an entity's statuses a record is.
type StatusKind string

// The status kinds. Statuses live apart from entity keys, so that agents
// reporting them never conflict with life changes.
const (
	StatusMachine   StatusKind = "machine"    // the machine agent's status
	StatusUnitAgent StatusKind = "unit-agent" // the unit agent's status and state
	StatusUnit      StatusKind = "unit"       // the workload's status, set by the charm
	StatusService   StatusKind = "service"
	// StatusServiceVersion holds the version of the service's workload in
	// its status (application-version-set), at most MaxVersionBytes.
	StatusServiceVersion StatusKind = "service-version"
)

// MaxVersionBytes bounds a service's workload version.
const MaxVersionBytes = 256

var (
	machineStatusKinds = []StatusKind{StatusMachine}
	unitStatusKinds    = []StatusKind{StatusUnitAgent, StatusUnit}
)

// entityKey returns the key of the entity a status of kind belongs to.
func entityKey(kind StatusKind, id string) (string, error) {
	switch kind {
	case StatusMachine:
		return MachineKey(id), checkMachineID(id)
	case StatusUnitAgent, StatusUnit:
		return UnitKey(id), checkUnitName(id)
	case StatusService, StatusServiceVersion:
		return ServiceKey(id), checkServiceName(id)
	}
	return "", invalidf("unknown status kind %q", kind)
}

// SetStatus records an entity's status of the given kind, stamped with the
// time when st has none. The entity must exist; its life does not matter.
// A unit's statuses (StatusUnitAgent, StatusUnit) also go into its status
// history, in the same transaction (see StatusHistory); setting a unit the
// status it already has (the same status, message and data) changes
// nothing but its seq and the barrier its agent has seen
// (pb.Status.SyncedRevision, never lowered so). A unit's status with a seq (pb.Status.Seq) below the
// stored one's, by less than seqClockStep, is a report overtaken by a newer
// one of the same agent, and is ignored.
func (s *State) SetStatus(ctx context.Context, kind StatusKind, id string, st *pb.Status) error {
	ek, err := entityKey(kind, id)
	if err != nil {
		return err
	}
	if kind == StatusServiceVersion && len(st.GetStatus()) > MaxVersionBytes {
		return invalidf("version of service %s: %d bytes, at most %d", id, len(st.GetStatus()), MaxVersionBytes)
	}
	st = protoClone(st)
	if st.SinceUnixNano == 0 {
		st.SinceUnixNano = s.now().UnixNano()
	}
	if kind == StatusUnitAgent || kind == StatusUnit {
		return s.setUnitStatus(ctx, kind, id, st)
	}
	c := &change{}
	c.ifExists(ek)
	c.put(StatusKey(kind, id), st)
	ok, err := s.commit(ctx, c)
	if err != nil {
		return err
	}
	if !ok {
		return notFoundf("%s %s not found", strings.TrimSuffix(string(kind), "-agent"), id)
	}
	return nil
}

// UnitStatus is a report of a unit's status, for SetUnitStatuses.
type UnitStatus struct {
	Kind   StatusKind // StatusUnitAgent or StatusUnit
	Unit   string
	Status *pb.Status
}

// statusesPerTxn bounds the reports SetUnitStatuses records in one
// transaction: each takes six operations at most.
const statusesPerTxn = MaxTxnOps / 6

// SetUnitStatuses records units' statuses as SetStatus does, several to a
// transaction: a machine agent reports its units' statuses together, one
// call and one transaction where each unit's report was one of each. It
// returns, for each report, nil when it was recorded (or changed nothing,
// as SetStatus says) or the error that refused it alone (the unit is not
// found); or an error of the whole call, when etcd could not be reached
// or the reports are not well formed. A unit may appear once.
func (s *State) SetUnitStatuses(ctx context.Context, reports []UnitStatus) ([]error, error) {
	seen := make(map[string]bool, len(reports))
	stamped := make([]UnitStatus, len(reports))
	now := s.now().UnixNano()
	for i, r := range reports {
		if r.Kind != StatusUnitAgent && r.Kind != StatusUnit {
			return nil, invalidf("status kind %q is not a unit's", r.Kind)
		}
		if err := checkUnitName(r.Unit); err != nil {
			return nil, err
		}
		if seen[r.Unit] {
			return nil, invalidf("unit %s is reported twice", r.Unit)
		}
		seen[r.Unit] = true
		st := protoClone(r.Status)
		if st.SinceUnixNano == 0 {
			st.SinceUnixNano = now
		}
		stamped[i] = UnitStatus{Kind: r.Kind, Unit: r.Unit, Status: st}
	}
	errs := make([]error, len(reports))
	for from := 0; from < len(stamped); from += statusesPerTxn {
		to := min(from+statusesPerTxn, len(stamped))
		if err := s.setUnitStatusesOnce(ctx, stamped[from:to], errs[from:to]); err != nil {
			return nil, err
		}
	}
	return errs, nil
}

// setUnitStatusesOnce records reports in one transaction, setting errs
// for those refused.
func (s *State) setUnitStatusesOnce(ctx context.Context, reports []UnitStatus, errs []error) error {
	return s.apply(ctx, "set the statuses of units", func(ctx context.Context) (*change, error) {
		gets := make([]getOp, 0, 3*len(reports))
		for _, r := range reports {
			gets = append(gets, unitStatusGets(r.Kind, r.Unit)...)
		}
		rd, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		c := &change{}
		for i, r := range reports {
			errs[i] = unitStatusOps(c, rd, 3*i, r.Kind, r.Unit, r.Status)
			if errs[i] != nil && !errors.Is(errs[i], ErrNotFound) {
				return nil, errs[i]
			}
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		return c, nil
	})
}

// Status returns an entity's status of the given kind, or nil when none
// was ever set.
func (s *State) Status(ctx context.Context, kind StatusKind, id string) (*pb.Status, error) {
	if _, err := entityKey(kind, id); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(StatusKey(kind, id)))
	if err != nil {
		return nil, err
	}
	st, err := decode[pb.Status](r.one(0))
	if err != nil || st == nil {
		return nil, err
	}
	return st.v, nil
}

package state

import (
	"context"
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
)

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
	case StatusService:
		return ServiceKey(id), checkServiceName(id)
	}
	return "", invalidf("unknown status kind %q", kind)
}

// SetStatus records an entity's status of the given kind, stamped with the
// time when st has none. The entity must exist; its life does not matter.
// A unit's statuses (StatusUnitAgent, StatusUnit) also go into its status
// history, in the same transaction (see StatusHistory); setting a unit the
// status it already has (the same status, message and data) changes
// nothing but its seq. A unit's status with a seq (pb.Status.Seq) below the
// stored one's, by less than seqClockStep, is a report overtaken by a newer
// one of the same agent, and is ignored.
func (s *State) SetStatus(ctx context.Context, kind StatusKind, id string, st *pb.Status) error {
	ek, err := entityKey(kind, id)
	if err != nil {
		return err
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

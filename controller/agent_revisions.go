package controller

import (
	"context"
	"fmt"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A unit's agent follows its unit's revisions (the unit_revision watch
// subject), reads the spec of the one it is to run (GetRevision) and
// reports running it (SetUnitRevision). Each call is the unit's agent's
// or its machine agent's, about the unit's own service.

// GetRevision returns a revision of the unit's service.
func (a *agentServer) GetRevision(ctx context.Context, req *pb.GetRevisionRequest) (*pb.GetRevisionResponse, error) {
	unit := req.GetUnit()
	if err := a.ownOrMachineUnit(ctx, callerFrom(ctx), unit, "read the revisions of"); err != nil {
		return nil, err
	}
	if req.GetNumber() < 1 {
		return nil, invalid("revision %d: want a number of at least 1", req.GetNumber())
	}
	svc := names.UnitService(unit)
	rev, err := a.s.st.ServiceRevision(ctx, svc, req.GetNumber())
	if err != nil {
		return nil, readErr(err, "read revision %d of service %s", req.GetNumber(), svc)
	}
	return &pb.GetRevisionResponse{Revision: rev}, nil
}

// SetUnitRevision records that the unit runs revision, its target.
func (a *agentServer) SetUnitRevision(ctx context.Context, req *pb.SetUnitRevisionRequest) (*pb.SetUnitRevisionResponse, error) {
	unit := req.GetUnit()
	if err := a.ownOrMachineUnit(ctx, callerFrom(ctx), unit, "report the revision of"); err != nil {
		return nil, err
	}
	if req.GetRevision() < 1 {
		return nil, invalid("revision %d: want a number of at least 1", req.GetRevision())
	}
	if err := a.s.st.SetUnitRevision(ctx, unit, req.GetRevision()); err != nil {
		return nil, fmt.Errorf("set the revision of unit %s: %w", unit, err)
	}
	return &pb.SetUnitRevisionResponse{}, nil
}

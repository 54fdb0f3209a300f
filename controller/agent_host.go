package controller

import (
	"context"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// SetHostReport records what a unit holds on its host (its claims as
// rendered, its last host job, conflicts, its daemons): the unit's agent
// or its machine's agent reports it, after each host job and when a
// daemon's state changes. The record is bounded (state.MaxHostReportBytes,
// InvalidArgument past it), each report replaces the one before, and the
// calls count against the caller's write budget as any write does.
func (a *agentServer) SetHostReport(ctx context.Context, req *pb.SetHostReportRequest) (*pb.SetHostReportResponse, error) {
	unit := req.GetUnit()
	if err := a.ownOrMachineUnit(ctx, callerFrom(ctx), unit, "report the host of"); err != nil {
		return nil, err
	}
	r := req.GetReport()
	if r == nil {
		return nil, invalid("host report of unit %s: no report", unit)
	}
	if n := proto.Size(r); n > state.MaxHostReportBytes {
		return nil, invalid("host report of unit %s is %d bytes: at most %d", unit, n, state.MaxHostReportBytes)
	}
	if err := a.s.st.SetHostReport(ctx, unit, r); err != nil {
		return nil, err
	}
	return &pb.SetHostReportResponse{}, nil
}

package controller

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The kinds of StatusLogEntry, as ctl status names a unit's two statuses.
const (
	logKindAgent    = "agent"
	logKindWorkload = "workload"
)

// ShowStatusLog returns the newest entries of a unit's status history,
// oldest first: every change of its agent's and its workload's status, the
// last state.StatusHistoryLimit of them.
func (s *Server) ShowStatusLog(ctx context.Context, req *pb.ShowStatusLogRequest) (*pb.ShowStatusLogResponse, error) {
	if err := checkUnitName(req.GetUnit()); err != nil {
		return nil, err
	}
	if n := req.GetLimit(); n < 0 || n > state.StatusHistoryLimit {
		return nil, invalid("limit %d: want 1 to %d (a unit keeps its last %d status changes), or 0 for all", n, state.StatusHistoryLimit, state.StatusHistoryLimit)
	}
	h, err := s.st.StatusHistory(ctx, req.GetUnit(), int(req.GetLimit()))
	if err != nil {
		return nil, readErr(err, "read the status history of unit %s", req.GetUnit())
	}
	resp := &pb.ShowStatusLogResponse{Entries: make([]*pb.StatusLogEntry, 0, len(h))}
	for _, e := range h {
		kind := logKindWorkload
		if e.Kind == state.StatusUnitAgent {
			kind = logKindAgent
		}
		resp.Entries = append(resp.Entries, &pb.StatusLogEntry{
			Kind:          kind,
			Status:        e.Status.GetStatus(),
			Message:       e.Status.GetMessage(),
			Data:          e.Status.GetData(),
			SinceUnixNano: e.Status.GetSinceUnixNano(),
		})
	}
	return resp, nil
}

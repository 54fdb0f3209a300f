package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A service's revisions over the OperatorService: its history, one
// revision's spec, and a rollback to a kept one (docs/DESIGN.md,
// Revisions and rollouts). state keeps the revisions and makes the new
// one (state.ChangeSpec); the controller picks the spec to return to and
// refuses what a rollback cannot do yet (change the charm).

// ListRevisions lists a service's kept revisions, newest first, each
// with its changes but not its configuration, and how many units run it.
func (s *Server) ListRevisions(ctx context.Context, req *pb.ListRevisionsRequest) (*pb.ListRevisionsResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	ro, err := s.st.Rollout(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	revs, err := s.st.Revisions(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	units, err := s.unitsByRevision(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListRevisionsResponse{Service: req.Service, Head: ro.Head}
	for i := len(revs) - 1; i >= 0; i-- {
		resp.Revisions = append(resp.Revisions, revisionBrief(revs[i], units))
	}
	return resp, nil
}

// ShowRevision shows one revision of a service (the head for 0): its
// spec and its changes from the revision before it.
func (s *Server) ShowRevision(ctx context.Context, req *pb.ShowRevisionRequest) (*pb.ShowRevisionResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	if req.Number < 0 {
		return nil, invalid("revision %d: want a revision's number, or 0 for the newest", req.Number)
	}
	ro, err := s.st.Rollout(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	n := req.Number
	if n == 0 {
		n = ro.Head
	}
	kept, err := s.st.RevisionNumbers(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	rev, err := s.st.ServiceRevision(ctx, req.Service, n)
	if errors.Is(err, state.ErrNotFound) {
		return nil, notKept(req.Service, n, kept)
	}
	if err != nil {
		return nil, err
	}
	units, err := s.unitsByRevision(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	return &pb.ShowRevisionResponse{
		Revision: revisionBrief(rev, units), Spec: rev.Spec, Head: ro.Head,
		PreviousKept: containsNum(kept, n-1),
	}, nil
}

// RollbackService makes a new revision of a service whose spec is that
// of a kept revision (the one before the head for 0), by the caller,
// with the reason "rollback to N": charm and configuration together.
// Refused when the spec is the head's already, and when the revision's
// charm lacks an endpoint a relation of the service uses.
func (s *Server) RollbackService(ctx context.Context, req *pb.RollbackServiceRequest) (*pb.RollbackServiceResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	if req.To < 0 {
		return nil, invalid("revision %d: want a revision's number, or 0 for the one before the newest", req.To)
	}
	ro, err := s.st.Rollout(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	to := req.To
	if to == 0 {
		to = ro.Head - 1
	}
	kept, err := s.st.RevisionNumbers(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	if to < 1 {
		return nil, status.Errorf(codes.NotFound, "service %s has no revision before %d to roll back to: it keeps %s", req.Service, ro.Head, keptText(kept))
	}
	target, err := s.st.ServiceRevision(ctx, req.Service, to)
	if errors.Is(err, state.ErrNotFound) {
		return nil, notKept(req.Service, to, kept)
	}
	if err != nil {
		return nil, err
	}
	rev, err := s.st.ChangeSpec(ctx, req.Service, state.SpecChange{By: userName(ctx), Reason: fmt.Sprintf("rollback to %d", to), History: s.cfg.RevisionHistory,
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			if hc, tc := head.Spec.GetCharm(), target.Spec.GetCharm(); !proto.Equal(hc, tc) {
				// Another charm: the revision's endpoints come back
				// with it (a relation using one it lacks refuses).
				return target.Spec, target.Endpoints, nil
			}
			// The same charm: its endpoints are the service's.
			return target.Spec, nil, nil
		}})
	if err != nil {
		return nil, err
	}
	return &pb.RollbackServiceResponse{Revision: revisionBrief(rev, nil), To: to}, nil
}

// unitsByRevision counts a service's units by the revision they run.
func (s *Server) unitsByRevision(ctx context.Context, service string) (map[int64]int32, error) {
	urs, err := s.st.UnitRevisions(ctx, service)
	if err != nil {
		return nil, err
	}
	out := map[int64]int32{}
	for _, ur := range urs {
		out[ur.Current]++
	}
	return out, nil
}

func revisionBrief(rev *pb.Revision, units map[int64]int32) *pb.RevisionBrief {
	return &pb.RevisionBrief{
		Number: rev.Number, Id: rev.Id, Charm: rev.Spec.GetCharm(), Reason: rev.Reason, By: rev.By,
		CreatedUnixNano: rev.CreatedUnixNano, Changes: rev.Changes, Units: units[rev.Number],
	}
}

// notKept refuses revision n of service, naming the ones kept.
func notKept(service string, n int64, kept []int64) error {
	return status.Errorf(codes.NotFound, "service %s has no revision %d: it keeps %s", service, n, keptText(kept))
}

// keptText names the revisions kept, runs as ranges: "revisions 3 to 12",
// "revisions 1, 4 to 12", "revision 1".
func keptText(kept []int64) string {
	if len(kept) == 0 {
		return "no revisions"
	}
	var parts []string
	for i := 0; i < len(kept); {
		j := i
		for j+1 < len(kept) && kept[j+1] == kept[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(kept[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d to %d", kept[i], kept[j]))
		}
		i = j + 1
	}
	if len(kept) == 1 {
		return "revision " + parts[0]
	}
	return "revisions " + strings.Join(parts, ", ")
}

func containsNum(nums []int64, n int64) bool {
	for _, m := range nums {
		if m == n {
			return true
		}
	}
	return false
}

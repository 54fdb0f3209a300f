package controller

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// ClaimOwnership records a manifest as the owner of entities ctl apply
// created for it (state/owners.go): what prune may later destroy.
func (s *Server) ClaimOwnership(ctx context.Context, req *pb.ClaimOwnershipRequest) (*pb.ClaimOwnershipResponse, error) {
	if err := s.st.ClaimOwnership(ctx, req.Manifest, userName(ctx), req.Entities); err != nil {
		return nil, err
	}
	return &pb.ClaimOwnershipResponse{}, nil
}

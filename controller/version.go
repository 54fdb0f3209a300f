package controller

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Version says what this controller's binary is (Config.Build).
func (s *Server) Version(context.Context, *pb.VersionRequest) (*pb.VersionResponse, error) {
	b := s.cfg.Build
	return &pb.VersionResponse{Version: b.Version, Commit: b.Commit, BuildDate: b.Date, GoVersion: b.GoVersion,
		Platform: b.Platform, Controller: s.cfg.ID}, nil
}

package controller

import (
	"context"
	"strings"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthPrefix starts the methods of the standard gRPC health service
// (grpc.health.v1.Health), which load balancers and probes call without a
// credential. Its answers are what the composition root last set
// (Config.Health): they read nothing.
const healthPrefix = "/grpc.health.v1.Health/"

// The budget of the health service's calls on a controller, shared by
// every caller (none has a credential): ample for probes every second
// from many balancers, and a bound on what a flood costs. Watch streams
// hold a goroutine each while they live: at most maxHealthWatches at once.
const (
	healthRate       = 50 // a second
	healthBurst      = 100
	maxHealthWatches = 32
)

// healthGate admits the health service's calls within their budget.
type healthGate struct {
	calls   *rate.Limiter
	watches chan struct{}
}

func newHealthGate() *healthGate {
	return &healthGate{calls: rate.NewLimiter(healthRate, healthBurst), watches: make(chan struct{}, maxHealthWatches)}
}

func (h *healthGate) allow() error {
	if !h.calls.Allow() {
		return status.Error(codes.ResourceExhausted, "too many health checks on this controller: try again in a second")
	}
	return nil
}

// healthUnary answers a health check (Check, List) without a credential,
// within the health budget.
func (s *Server) healthUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	err := s.health.allow()
	var resp any
	if err == nil {
		resp, err = handler(ctx, req)
	}
	return resp, err
}

// healthStream serves a health Watch without a credential, within the
// health budget and the bound on open watches.
func (s *Server) healthStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := s.health.allow()
	if err == nil {
		select {
		case s.health.watches <- struct{}{}:
			err = handler(srv, ss)
			<-s.health.watches
		default:
			err = status.Errorf(codes.ResourceExhausted, "too many health watches open on this controller (%d)", maxHealthWatches)
		}
	}
	return err
}

func isHealth(method string) bool { return strings.HasPrefix(method, healthPrefix) }

// registerHealth registers the health service on g when the configuration
// has one.
func registerHealth(g *grpc.Server, h *health.Server) {
	if h != nil {
		healthpb.RegisterHealthServer(g, h)
	}
}

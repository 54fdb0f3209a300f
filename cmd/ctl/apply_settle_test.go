package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/manifest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// barrierFails answers the calls a wait makes for one settled unit, kv/0,
// but its first n Barrier calls with err: a seam for how apply's wait
// takes a controller's refusal, which a real one gives only under load.
type barrierFails struct {
	pb.UnimplementedOperatorServiceServer
	n     int32
	err   error
	calls atomic.Int32
}

func (f *barrierFails) Barrier(context.Context, *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	if f.calls.Add(1) <= f.n {
		return nil, f.err
	}
	return &pb.BarrierResponse{Revision: 5}, nil
}

func (f *barrierFails) WatchStatus(_ *pb.WatchStatusRequest, stream pb.OperatorService_WatchStatusServer) error {
	st := &pb.ModelStatus{Revision: 5, Services: []*pb.ServiceStatus{{Name: "kv", Life: "alive", Units: []*pb.UnitStatus{
		{Name: "kv/0", Life: "alive", Machine: "0", Agent: "idle", State: "running", SyncedRevision: 5}}}}}
	if err := stream.Send(&pb.WatchStatusResponse{Status: st}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func settleWith(t *testing.T, f *barrierFails, timeout time.Duration) error {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterOperatorServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	x := &ctlExecutor{e: &env{}, c: &client{conn: conn, op: pb.NewOperatorServiceClient(conn), addrs: []string{lis.Addr().String()}}, timeout: timeout}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return x.settle(ctx, &manifest.ResourcePlan{Name: "kv", Type: manifest.TypeService})
}

// Apply's wait for a resource's units waits out a controller answering
// Unavailable (etcd's "request timed out" under load), within its
// timeout; any other refusal ends it at once.
func TestApplySettleWaitsOutUnavailable(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "etcdserver: request timed out")
	f := &barrierFails{n: 2, err: unavailable}
	if err := settleWith(t, f, time.Minute); err != nil {
		t.Errorf("settle after two Unavailable barriers = %v, want settled", err)
	}
	f = &barrierFails{n: 1, err: status.Error(codes.PermissionDenied, "no")}
	if err := settleWith(t, f, time.Minute); status.Code(err) != codes.PermissionDenied || f.calls.Load() != 1 {
		t.Errorf("settle refused PermissionDenied = %v after %d barriers, want that error after one", err, f.calls.Load())
	}
	f = &barrierFails{n: 1000, err: unavailable}
	err := settleWith(t, f, 2*time.Second)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "waiting for its units to settle") {
		t.Errorf("settle always Unavailable = %v, want the Unavailable error once the timeout passed", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("settle ran into the test's deadline: %v", err)
	}
}

package controller_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The health service answers without a credential what the controller's
// owner set, within its budget; the rest of the API still wants one.
func TestHealthWithoutACredential(t *testing.T) {
	hs := health.NewServer()
	e := newEnvWith(t, controllertest.Options{Health: hs})
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{e.addr}, CACert: e.ca.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	for _, want := range []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING} {
		hs.SetServingStatus("", want)
		got, err := hc.Check(e.ctx, &healthpb.HealthCheckRequest{})
		if err != nil || got.Status != want {
			t.Errorf("Check = %v, %v; want %v", got, err, want)
		}
	}
	w, err := hc.Watch(e.ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.Recv(); err != nil || got.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch = %v, %v; want SERVING", got, err)
	}
	if _, err := hc.Check(e.ctx, &healthpb.HealthCheckRequest{Service: "lifeline.v1.Nothing"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service = %v, want NotFound", err)
	}
	if _, err := pb.NewOperatorServiceClient(conn).Version(e.ctx, &pb.VersionRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Version without a credential = %v, want Unauthenticated", err)
	}
	// Past the budget's burst, checks are refused for a moment: 2,000
	// checks from 32 callers at once outrun its refill (50 a second) on a
	// loaded machine too.
	var refused atomic.Bool
	var wg sync.WaitGroup
	var made atomic.Int32
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !refused.Load() && made.Add(1) <= 2000 {
				if _, err := hc.Check(e.ctx, &healthpb.HealthCheckRequest{}); status.Code(err) == codes.ResourceExhausted {
					refused.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if !refused.Load() {
		t.Error("2,000 checks at once: none refused, want the budget to refuse some")
	}
}

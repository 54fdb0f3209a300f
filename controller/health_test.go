package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/apiclient"
	"github.com/lifelinehq/lifeline/controllertest"
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
	// Past the budget's burst, checks are refused for a moment.
	refused := false
	for range 300 {
		if _, err := hc.Check(e.ctx, &healthpb.HealthCheckRequest{}); status.Code(err) == codes.ResourceExhausted {
			refused = true
			break
		}
	}
	if !refused {
		t.Error("300 checks at once: none refused, want the budget to refuse some")
	}
}

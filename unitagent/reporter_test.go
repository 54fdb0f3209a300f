package unitagent

import (
	"context"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// statusRecorder is the one method of the API the reporter calls.
type statusRecorder struct {
	API
	mu   sync.Mutex
	sent []string
}

func (s *statusRecorder) SetUnitStatus(_ context.Context, req *pb.SetUnitStatusRequest, _ ...grpc.CallOption) (*pb.SetUnitStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, req.Status.Status+":"+req.Status.Message)
	return &pb.SetUnitStatusResponse{}, nil
}

func (s *statusRecorder) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// Quick steps are reported where they end up; a status with a hook's
// output or an error is sent even when another follows at once.
func TestReporterCoalescesButKeepsHistory(t *testing.T) {
	api := &statusRecorder{}
	r := newReporter(api, "kv/0", hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.run(ctx)

	r.set(&pb.Status{Status: "executing", Message: "running install hook"})
	r.set(&pb.Status{Status: "executing", Message: "running start hook"})
	r.set(&pb.Status{Status: "idle"})
	r.flush(ctx)
	if got := api.got(); len(got) != 1 || got[0] != "idle:" {
		t.Fatalf("three quick statuses sent as %q, want only the last", got)
	}

	r.set(&pb.Status{Status: "executing", Message: "running config-changed hook"})
	r.set(&pb.Status{Status: "executing", Message: "ran config-changed hook", Data: map[string]string{"output": "hello"}})
	r.set(&pb.Status{Status: "error", Message: `hook failed: "start"`})
	r.set(&pb.Status{Status: "idle", Message: "again"})
	r.flush(ctx)
	want := []string{"idle:", "executing:ran config-changed hook", `error:hook failed: "start"`, "idle:again"}
	got := api.got()
	if len(got) != len(want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
}

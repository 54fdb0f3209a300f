package unitagent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// reportAPI records the host reports sent, refusing the first refuse of
// them as a controller away would.
type reportAPI struct {
	API
	mu      sync.Mutex
	refuse  int
	reports []*pb.HostReport
	at      []time.Time
}

func (a *reportAPI) SetHostReport(_ context.Context, in *pb.SetHostReportRequest, _ ...grpc.CallOption) (*pb.SetHostReportResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse > 0 {
		a.refuse--
		return nil, status.Error(codes.Unavailable, "away")
	}
	a.reports, a.at = append(a.reports, in.Report), append(a.at, time.Now())
	return &pb.SetHostReportResponse{}, nil
}

func (a *reportAPI) sent() ([]*pb.HostReport, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*pb.HostReport(nil), a.reports...), append([]time.Time(nil), a.at...)
}

// TestHostReportsAreSpaced: a burst of changes makes few reports, spaced
// by the reporter's interval, the last change always among them; a report
// the controller refuses is sent again.
func TestHostReportsAreSpaced(t *testing.T) {
	api := &reportAPI{refuse: 1}
	r := &hostReporter{api: api, unit: "kv/0", logger: hclog.NewNullLogger(), every: 300 * time.Millisecond, kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	defer func() { cancel(); <-done }()
	for i := int64(1); i <= 30; i++ {
		r.set(&pb.HostReport{AppliedRevision: i})
		time.Sleep(20 * time.Millisecond)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		reports, at := api.sent()
		if n := len(reports); n > 0 && reports[n-1].AppliedRevision == 30 {
			if n > 4 {
				t.Errorf("%d reports for 30 changes in 0.6 s, want at most 4", n)
			}
			for i := 1; i < n; i++ {
				if gap := at[i].Sub(at[i-1]); gap < 250*time.Millisecond {
					t.Errorf("reports %d and %d %s apart, want at least the interval", i-1, i, gap)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last change was never reported: %v", reports)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeStandingGate is a machine's gate in memory that says a unit's standing
// conflicts, as set.
type fakeStandingGate struct {
	ClaimsGate
	mu       sync.Mutex
	standing []string
	changed  chan struct{}
}

func (g *fakeStandingGate) Standing(string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.standing...)
}

func (g *fakeStandingGate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *fakeStandingGate) set(standing ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.standing = standing
	close(g.changed)
	g.changed = make(chan struct{})
}

// TestHostReportShowsStandingConflicts: a unit held back by claims it did
// not ask for (the gate's standing conflicts) reports them, without a
// change of its own, as the gate's claims change; its own refusal, when
// it has one, is reported instead.
func TestHostReportShowsStandingConflicts(t *testing.T) {
	api := &reportAPI{}
	gate := &fakeStandingGate{changed: make(chan struct{})}
	r := &hostReporter{api: api, unit: "web/1", logger: hclog.NewNullLogger(), every: 50 * time.Millisecond, kick: make(chan struct{}, 1), gate: gate}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	defer func() { cancel(); <-done }()
	last := func(what string, cond func(*pb.HostReport) bool) {
		t.Helper()
		poll.UntilSays(t, "a report "+what, func() (bool, string) {
			reports, _ := api.sent()
			n := len(reports)
			return n > 0 && cond(reports[n-1]), fmt.Sprint(reports)
		})
	}
	r.set(&pb.HostReport{AppliedRevision: 3})
	last("without conflicts", func(h *pb.HostReport) bool { return h.AppliedRevision == 3 && len(h.Conflicts) == 0 })

	gate.set("held: port 8080/tcp is claimed by web/0")
	last("with the standing conflict", func(h *pb.HostReport) bool {
		return len(h.Conflicts) == 1 && h.Conflicts[0] == "held: port 8080/tcp is claimed by web/0"
	})

	r.set(&pb.HostReport{AppliedRevision: 3, Conflicts: []string{"port 9090/tcp is claimed by db/0: kept revision 3"}})
	last("with its own refusal", func(h *pb.HostReport) bool {
		return len(h.Conflicts) == 1 && h.Conflicts[0] == "port 9090/tcp is claimed by db/0: kept revision 3"
	})

	r.set(&pb.HostReport{AppliedRevision: 3})
	gate.set()
	last("without conflicts again", func(h *pb.HostReport) bool { return len(h.Conflicts) == 0 })
}

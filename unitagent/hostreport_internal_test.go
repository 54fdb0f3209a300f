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
// them as a controller away would. With calls set, each call waits
// there until the test closes the channel it hands over: the report it
// carries is in flight until then.
type reportAPI struct {
	API
	calls chan chan struct{}

	mu      sync.Mutex
	refuse  int
	reports []*pb.HostReport
	at      []time.Time
}

func (a *reportAPI) SetHostReport(ctx context.Context, in *pb.SetHostReportRequest, _ ...grpc.CallOption) (*pb.SetHostReportResponse, error) {
	arrived := time.Now()
	if a.calls != nil {
		release := make(chan struct{})
		select {
		case a.calls <- release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse > 0 {
		a.refuse--
		return nil, status.Error(codes.Unavailable, "away")
	}
	a.reports, a.at = append(a.reports, in.Report), append(a.at, arrived)
	return &pb.SetHostReportResponse{}, nil
}

func (a *reportAPI) sent() ([]*pb.HostReport, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*pb.HostReport(nil), a.reports...), append([]time.Time(nil), a.at...)
}

// next waits for the reporter's next call and returns the channel that
// lets it through.
func (a *reportAPI) next(t *testing.T, what string) chan struct{} {
	t.Helper()
	var release chan struct{}
	poll.Until(t, what, func() bool {
		select {
		case release = <-a.calls:
			return true
		default:
			return false
		}
	})
	return release
}

// accepted waits until n reports are recorded, and returns those sent
// (failing the test when there are more).
func (a *reportAPI) accepted(t *testing.T, n int) ([]*pb.HostReport, []time.Time) {
	t.Helper()
	poll.UntilSays(t, fmt.Sprintf("%d reports", n), func() (bool, string) {
		reports, _ := a.sent()
		return len(reports) >= n, fmt.Sprint(reports)
	})
	reports, at := a.sent()
	if len(reports) != n {
		t.Fatalf("reported %v, want %d reports", reports, n)
	}
	return reports, at
}

// TestHostReportsAreSpaced: the changes made while a report is in flight
// make one report, of the last change; a report the controller refuses is
// sent again, with the changes made meanwhile; and the report after one
// sent waits out the reporter's interval from it.
func TestHostReportsAreSpaced(t *testing.T) {
	api := &reportAPI{refuse: 1, calls: make(chan chan struct{})}
	r := &hostReporter{api: api, unit: "kv/0", logger: hclog.NewNullLogger(), every: 300 * time.Millisecond, kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx) }()
	defer func() { cancel(); <-done }()

	r.set(&pb.HostReport{AppliedRevision: 1})
	first := api.next(t, "the first report")
	for i := int64(2); i <= 30; i++ {
		r.set(&pb.HostReport{AppliedRevision: i})
	}
	close(first) // refused: the controller is away
	close(api.next(t, "the refused report sent again"))
	reports, _ := api.accepted(t, 1)
	if reports[0].AppliedRevision != 30 {
		t.Fatalf("reported %v after 30 changes, the first refused; want one report, of the 30th", reports)
	}

	r.set(&pb.HostReport{AppliedRevision: 31})
	close(api.next(t, "the report of a change after it"))
	reports, at := api.accepted(t, 2)
	if reports[0].AppliedRevision != 30 || reports[1].AppliedRevision != 31 {
		t.Fatalf("reported %v, want the 30th change then the 31st", reports)
	}
	// A lower bound, the reporter's promise: a slow machine only spaces
	// the reports further.
	if gap := at[1].Sub(at[0]); gap < r.every {
		t.Errorf("reports %s apart, want at least the interval %s", gap, r.every)
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

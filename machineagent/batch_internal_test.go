package machineagent

import (
	"context"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// batchAPI stands in for the controller at the statusBatcher's one call:
// each call waits for release (when set), then answers every report with
// answer's result for its unit.
type batchAPI struct {
	API
	mu      sync.Mutex
	calls   [][]string // the units of each call
	release chan struct{}
	unimpl  bool
	answer  func(unit string) *pb.StatusReportResult
}

func (f *batchAPI) SetUnitStatuses(ctx context.Context, in *pb.SetUnitStatusesRequest, _ ...grpc.CallOption) (*pb.SetUnitStatusesResponse, error) {
	var units []string
	for _, r := range in.GetReports() {
		units = append(units, r.GetUnit())
	}
	f.mu.Lock()
	f.calls = append(f.calls, units)
	f.mu.Unlock()
	if f.unimpl {
		return nil, status.Error(codes.Unimplemented, "unknown method SetUnitStatuses")
	}
	if f.release != nil {
		<-f.release
	}
	resp := &pb.SetUnitStatusesResponse{}
	for _, u := range units {
		res := &pb.StatusReportResult{}
		if f.answer != nil {
			res = f.answer(u)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

// callsAre returns a condition for waitUntil: n calls made to api.
func (api *batchAPI) callsAre(n int) func() bool {
	return func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.calls) == n
	}
}

// queueIs returns a condition for waitUntil: n reports queued in b.
func queueIs(b *statusBatcher, n int) func() bool {
	return func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == n
	}
}

func agentReport(unit string) *pb.SetUnitStatusRequest {
	return &pb.SetUnitStatusRequest{Unit: unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: &pb.Status{Status: "idle"}}
}

// Reports made while a call is on its way go together in the next one,
// each answered as its own call would have been.
func TestStatusReportsWhileACallIsOnItsWayGoTogether(t *testing.T) {
	api := &batchAPI{release: make(chan struct{}), answer: func(unit string) *pb.StatusReportResult {
		if unit == "kv/3" {
			return &pb.StatusReportResult{Code: uint32(codes.NotFound), Message: "unit kv/3 not found"}
		}
		return &pb.StatusReportResult{}
	}}
	b := runBatcher(t, newStatusBatcher(api))
	own := func(context.Context) error { t.Error("a report sent alone"); return nil }
	errs := make([]error, 5)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = b.do(context.Background(), agentReport("kv/0"), own) }()
	poll.Until(t, "the first report was not sent", api.callsAre(1))
	for i := 1; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.do(context.Background(), agentReport(fmt.Sprintf("kv/%d", i)), own)
		}()
	}
	poll.Until(t, "the reports did not queue", queueIs(b, 4))
	close(api.release)
	wg.Wait()
	if len(api.calls) != 2 || len(api.calls[1]) != 4 {
		t.Fatalf("calls %v, want one of kv/0, then one of the four others", api.calls)
	}
	for i, err := range errs {
		if wantErr := i == 3; (err != nil) != wantErr || wantErr && status.Code(err) != codes.NotFound {
			t.Errorf("report of kv/%d: %v", i, err)
		}
	}
}

// A report its agent gave up on is not sent; a later one of the same unit
// replaces it.
func TestStatusReportGivenUpIsNotSent(t *testing.T) {
	api := &batchAPI{release: make(chan struct{})}
	b := runBatcher(t, newStatusBatcher(api))
	own := func(context.Context) error { return nil }
	first := make(chan error, 1)
	go func() { first <- b.do(context.Background(), agentReport("kv/0"), own) }()
	poll.Until(t, "the first report was not sent", api.callsAre(1))
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- b.do(ctx, agentReport("kv/1"), own) }()
	poll.Until(t, "the report did not queue", queueIs(b, 1))
	cancel()
	if err := <-gaveUp; status.Code(err) != codes.Canceled {
		t.Errorf("a report given up: %v, want Canceled", err)
	}
	later := make(chan error, 1)
	go func() { later <- b.do(context.Background(), agentReport("kv/1"), own) }()
	poll.Until(t, "the later report did not queue", queueIs(b, 2))
	close(api.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatal(err)
	}
	if len(api.calls) != 2 || len(api.calls[1]) != 1 {
		t.Errorf("calls %v, want kv/1's later report sent once", api.calls)
	}
}

// A controller without SetUnitStatuses gets each report as its unit's own
// call, from then on.
func TestStatusReportsAloneToAControllerWithoutBatches(t *testing.T) {
	api := &batchAPI{unimpl: true}
	b := runBatcher(t, newStatusBatcher(api))
	var alone int
	own := func(context.Context) error { alone++; return errors.New("refused") }
	for range 2 {
		if err := b.do(context.Background(), agentReport("kv/0"), own); err == nil || err.Error() != "refused" {
			t.Errorf("report: %v, want its own call's answer", err)
		}
	}
	if alone != 2 || len(api.calls) != 1 {
		t.Errorf("%d reports sent alone, %d batches tried; want 2 and 1", alone, len(api.calls))
	}
}

// runBatcher runs b until the test ends.
func runBatcher[T any](t *testing.T, b *batcher[T]) *batcher[T] {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { b.run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return b
}

// Requests queued when the batcher's run ends, and those made after, are
// answered at once.
func TestBatcherEndedAnswersAtOnce(t *testing.T) {
	api := &batchAPI{release: make(chan struct{})}
	b := newStatusBatcher(api)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); b.run(ctx) }()
	own := func(context.Context) error { return nil }
	queued := make(chan error, 1)
	b.mu.Lock()
	b.queue = append(b.queue, &pending[*pb.SetUnitStatusRequest]{ctx: context.Background(), req: agentReport("kv/0"), own: own, done: make(chan error, 1)})
	r := b.queue[0]
	b.mu.Unlock()
	go func() { queued <- <-r.done }()
	cancel()
	<-ran
	if err := <-queued; err != errBatcherEnded {
		t.Errorf("a queued report: %v, want %v", err, errBatcherEnded)
	}
	if err := b.do(context.Background(), agentReport("kv/1"), own); err != errBatcherEnded {
		t.Errorf("a report after the end: %v, want %v", err, errBatcherEnded)
	}
	if len(api.calls) != 0 {
		t.Errorf("calls %v, want none", api.calls)
	}
}

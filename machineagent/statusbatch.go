package machineagent

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// statusBatcher sends the machine's unit agents' status reports to the
// controller together (SetUnitStatuses), one call at a time: the reports
// that come while a call is on its way go in the next. A unit agent
// reported its status in a call of its own, a transaction each; the ten
// units of a machine that start or stop together, most of them at once,
// now share a few calls and transactions. Each report is still answered
// on its own. A controller that does not serve SetUnitStatuses gets each
// report as the unit agent's own call, as before.
type statusBatcher struct {
	// ctx is the machine agent's: its calls end with it.
	ctx context.Context
	api API

	mu      sync.Mutex
	queue   []*statusReport
	sending bool
	// direct says the controller does not serve SetUnitStatuses.
	direct bool
}

// statusReport is a unit agent's report waiting for its answer.
type statusReport struct {
	ctx  context.Context
	req  *pb.SetUnitStatusRequest
	own  func(context.Context) error // the unit agent's own call of it
	done chan error
}

// maxBatch bounds the reports of one call.
const maxBatch = 32

// batchTimeout bounds a call, as a unit agent bounds its own report's.
const batchTimeout = 10 * time.Second

// errSuperseded answers a report replaced by a later one of its unit
// before it was sent: its agent gave up waiting for it and reported again.
var errSuperseded = errors.New("status report superseded by a later one of the same unit")

// report sends req with the next call and waits for its answer, until
// ctx ends; own is how the unit agent would have sent it alone.
func (b *statusBatcher) report(ctx context.Context, req *pb.SetUnitStatusRequest, own func(context.Context) error) error {
	r := &statusReport{ctx: ctx, req: req, own: own, done: make(chan error, 1)}
	b.mu.Lock()
	if b.direct {
		b.mu.Unlock()
		return own(ctx)
	}
	b.queue = append(b.queue, r)
	if !b.sending {
		b.sending = true
		go b.send()
	}
	b.mu.Unlock()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// send makes calls until the queue is empty.
func (b *statusBatcher) send() {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.sending = false
			b.mu.Unlock()
			return
		}
		direct := b.direct
		b.mu.Unlock()
		if direct {
			for _, r := range batch {
				r.done <- r.own(r.ctx)
			}
			continue
		}
		b.call(batch)
	}
}

// take removes the next batch from the queue: up to maxBatch reports whose
// callers still wait, a unit's latest only. b.mu is held.
func (b *statusBatcher) take() []*statusReport {
	latest := map[string]*statusReport{}
	for _, r := range b.queue {
		if old := latest[r.req.GetUnit()]; old != nil {
			old.done <- errSuperseded
		}
		latest[r.req.GetUnit()] = r
	}
	var batch, rest []*statusReport
	for _, r := range b.queue {
		switch {
		case latest[r.req.GetUnit()] != r:
		case r.ctx.Err() != nil:
			r.done <- status.FromContextError(r.ctx.Err()).Err()
		case len(batch) < maxBatch:
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	b.queue = rest
	return batch
}

// call sends one batch and answers its reports.
func (b *statusBatcher) call(batch []*statusReport) {
	req := &pb.SetUnitStatusesRequest{Reports: make([]*pb.SetUnitStatusRequest, len(batch))}
	for i, r := range batch {
		req.Reports[i] = r.req
	}
	ctx, cancel := context.WithTimeout(b.ctx, batchTimeout)
	resp, err := b.api.SetUnitStatuses(ctx, req)
	cancel()
	switch {
	case status.Code(err) == codes.Unimplemented:
		b.mu.Lock()
		b.direct = true
		b.mu.Unlock()
		for _, r := range batch {
			r.done <- r.own(r.ctx)
		}
		return
	case err == nil && len(resp.GetResults()) != len(batch):
		err = status.Errorf(codes.Internal, "the controller answered %d of %d status reports", len(resp.GetResults()), len(batch))
	}
	for i, r := range batch {
		if err != nil {
			r.done <- err
			continue
		}
		r.done <- resultErr(resp.GetResults()[i])
	}
}

// resultErr is a report's answer as the error its own call would have
// returned: nil when recorded.
func resultErr(res *pb.StatusReportResult) error {
	if codes.Code(res.GetCode()) == codes.OK {
		return nil
	}
	return status.Error(codes.Code(res.GetCode()), res.GetMessage())
}

// batchedAPI is a unit agent's API whose reports of its own agent status
// go through its machine's statusBatcher; everything else is its own.
type batchedAPI struct {
	unitagent.API
	unit string
	b    *statusBatcher
}

func (a batchedAPI) SetUnitStatus(ctx context.Context, req *pb.SetUnitStatusRequest, opts ...grpc.CallOption) (*pb.SetUnitStatusResponse, error) {
	own := func(ctx context.Context) error {
		_, err := a.API.SetUnitStatus(ctx, req, opts...)
		return err
	}
	if req.GetKind() != pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT || req.GetUnit() != a.unit {
		return a.API.SetUnitStatus(ctx, req, opts...)
	}
	if err := a.b.report(ctx, req, own); err != nil {
		return nil, err
	}
	return &pb.SetUnitStatusResponse{}, nil
}

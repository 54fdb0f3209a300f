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

// batcher sends requests of one kind to the controller together, in calls
// of several, one call at a time: the requests that come while a call is
// on its way go in the next. The ten units of a machine that start or
// stop together, most of them at once, share a few calls (and, for status
// reports, a few transactions) where each made its own. Each request is
// still answered on its own, as its own call would have been. A
// controller that does not serve the batched call (Unimplemented) gets
// each request as a call of its own from then on.
//
// Two kinds go this way: the unit agents' reports of their own agent
// status (SetUnitStatuses) and the agent's removals of its dead units
// (RemoveUnits).
type batcher[T any] struct {
	// max bounds the requests of one call; timeout bounds a call, as a
	// request's own call is bounded.
	max     int
	timeout time.Duration
	// key names what a request is about: of several about the same, only
	// the latest is sent, and the earlier ones answered errSuperseded.
	key func(T) string
	// call is the batched call: one result per request, in their order.
	call func(context.Context, []T) ([]*pb.StatusReportResult, error)
	// wake tells run that the queue has requests.
	wake chan struct{}

	mu    sync.Mutex
	queue []*pending[T]
	// ended says run has returned: requests are refused.
	ended bool
	// direct says the controller does not serve the batched call.
	direct bool
}

// pending is a request waiting for its answer.
type pending[T any] struct {
	ctx  context.Context
	req  T
	own  func(context.Context) error // the request's own call
	done chan error
}

// errSuperseded answers a request replaced by a later one about the same
// thing before it was sent: its caller gave up waiting for it and asked
// again.
var errSuperseded = errors.New("request superseded by a later one about the same")

// errBatcherEnded answers requests made once the machine agent stops.
var errBatcherEnded = status.Error(codes.Canceled, "the machine agent is stopping")

// do sends req with the next call and waits for its answer, until ctx
// ends; own is how req would be sent alone.
func (b *batcher[T]) do(ctx context.Context, req T, own func(context.Context) error) error {
	r := &pending[T]{ctx: ctx, req: req, own: own, done: make(chan error, 1)}
	b.mu.Lock()
	switch {
	case b.ended:
		b.mu.Unlock()
		return errBatcherEnded
	case b.direct:
		b.mu.Unlock()
		return own(ctx)
	}
	b.queue = append(b.queue, r)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default: // run is woken already
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// run makes the calls, one at a time, until ctx ends; then it answers
// what is queued errBatcherEnded, and so does do from then on. Its calls
// end with ctx. The machine agent's Run runs it.
func (b *batcher[T]) run(ctx context.Context) {
	defer func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.ended = true
		for _, r := range b.queue {
			r.done <- errBatcherEnded
		}
		b.queue = nil
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		for ctx.Err() == nil {
			b.mu.Lock()
			batch := b.take()
			direct := b.direct
			b.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if direct {
				sendOwn(batch)
				continue
			}
			b.send1(ctx, batch)
		}
	}
}

// take removes the next batch from the queue: up to max requests whose
// callers still wait, the latest about each thing only. b.mu is held.
func (b *batcher[T]) take() []*pending[T] {
	latest := map[string]*pending[T]{}
	for _, r := range b.queue {
		k := b.key(r.req)
		if old := latest[k]; old != nil {
			old.done <- errSuperseded
		}
		latest[k] = r
	}
	var batch, rest []*pending[T]
	for _, r := range b.queue {
		switch {
		case latest[b.key(r.req)] != r:
		case r.ctx.Err() != nil:
			r.done <- status.FromContextError(r.ctx.Err()).Err()
		case len(batch) < b.max:
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	b.queue = rest
	return batch
}

// send1 makes one call of batch and answers its requests.
func (b *batcher[T]) send1(ctx context.Context, batch []*pending[T]) {
	reqs := make([]T, len(batch))
	for i, r := range batch {
		reqs[i] = r.req
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	results, err := b.call(ctx, reqs)
	cancel()
	switch {
	case status.Code(err) == codes.Unimplemented:
		b.mu.Lock()
		b.direct = true
		b.mu.Unlock()
		sendOwn(batch)
		return
	case err == nil && len(results) != len(batch):
		err = status.Errorf(codes.Internal, "the controller answered %d of %d requests", len(results), len(batch))
	}
	for i, r := range batch {
		if err != nil {
			r.done <- err
			continue
		}
		r.done <- resultErr(results[i])
	}
}

// sendOwn sends each request of batch as its own call, and answers it.
func sendOwn[T any](batch []*pending[T]) {
	for _, r := range batch {
		r.done <- r.own(r.ctx)
	}
}

// resultErr is a request's answer as the error its own call would have
// returned: nil when done.
func resultErr(res *pb.StatusReportResult) error {
	if codes.Code(res.GetCode()) == codes.OK {
		return nil
	}
	return status.Error(codes.Code(res.GetCode()), res.GetMessage())
}

// statusBatcher sends the unit agents' reports of their agent status.
type statusBatcher = batcher[*pb.SetUnitStatusRequest]

func newStatusBatcher(api API) *statusBatcher {
	return &statusBatcher{
		max: 32, timeout: 10 * time.Second, wake: make(chan struct{}, 1),
		key: (*pb.SetUnitStatusRequest).GetUnit,
		call: func(ctx context.Context, reports []*pb.SetUnitStatusRequest) ([]*pb.StatusReportResult, error) {
			resp, err := api.SetUnitStatuses(ctx, &pb.SetUnitStatusesRequest{Reports: reports})
			return resp.GetResults(), err
		},
	}
}

// removalBatcher sends the agent's removals of its dead units.
type removalBatcher = batcher[string]

func newRemovalBatcher(api API) *removalBatcher {
	return &removalBatcher{
		max: 64, timeout: 30 * time.Second, wake: make(chan struct{}, 1),
		key: func(unit string) string { return unit },
		call: func(ctx context.Context, units []string) ([]*pb.StatusReportResult, error) {
			resp, err := api.RemoveUnits(ctx, &pb.RemoveUnitsRequest{Units: units})
			return resp.GetResults(), err
		},
	}
}

// batchedAPI is a unit agent's API whose reports of its own agent status
// go through its machine's statusBatcher, changed to say so while the unit
// is stuck without a credential the controller accepts (UnitCredential);
// everything else is its own.
type batchedAPI struct {
	unitagent.API
	unit string
	b    *statusBatcher
	cred *UnitCredential
}

func (a batchedAPI) SetUnitStatus(ctx context.Context, req *pb.SetUnitStatusRequest, opts ...grpc.CallOption) (*pb.SetUnitStatusResponse, error) {
	if req.GetKind() != pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT || req.GetUnit() != a.unit {
		return a.API.SetUnitStatus(ctx, req, opts...)
	}
	a.cred.mu.Lock()
	a.cred.report = req
	req = a.cred.asStuckLocked(req)
	a.cred.mu.Unlock()
	own := func(ctx context.Context) error {
		_, err := a.API.SetUnitStatus(ctx, req, opts...)
		return err
	}
	if err := a.b.do(ctx, req, own); err != nil {
		return nil, err
	}
	return &pb.SetUnitStatusResponse{}, nil
}

package unitagent

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// reporter tells the controller the agent's status: the latest one wins,
// and while the controller cannot be reached the latest waits and is sent
// when it can. The controller's copy is for ctl status; the local state
// file is what counts.
type reporter struct {
	api    API
	unit   string
	logger hclog.Logger

	mu      sync.Mutex
	want    *pb.Status // latest status to report
	sent    *pb.Status // last status the controller acknowledged
	pending chan struct{}
	done    chan struct{}
}

func newReporter(api API, unit string, logger hclog.Logger) *reporter {
	return &reporter{api: api, unit: unit, logger: logger, pending: make(chan struct{}, 1), done: make(chan struct{}, 1)}
}

// set records the status to report; an unchanged one is not sent again.
func (r *reporter) set(st *pb.Status) {
	r.mu.Lock()
	if proto.Equal(st, r.want) {
		r.mu.Unlock()
		return
	}
	r.want = st
	r.mu.Unlock()
	select {
	case r.pending <- struct{}{}:
	default:
	}
}

// flush waits, briefly, for the latest status to be acknowledged.
func (r *reporter) flush(ctx context.Context) {
	deadline := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		done := proto.Equal(r.want, r.sent)
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-r.done:
		}
	}
}

func (r *reporter) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.pending:
		}
		for {
			r.mu.Lock()
			st := r.want
			sent := proto.Equal(st, r.sent)
			r.mu.Unlock()
			if sent || st == nil {
				break
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := r.api.SetUnitStatus(cctx, &pb.SetUnitStatusRequest{Unit: r.unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: st})
			cancel()
			if err == nil {
				bo.Reset()
				r.mu.Lock()
				r.sent = st
				r.mu.Unlock()
				select {
				case r.done <- struct{}{}:
				default:
				}
				continue
			}
			if ctx.Err() != nil {
				return
			}
			r.logger.Debug("cannot report status yet", "error", err)
			if !sleep(ctx, bo.NextBackOff()) {
				return
			}
		}
	}
}

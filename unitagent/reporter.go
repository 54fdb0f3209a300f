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

// statusLinger is how long the reporter lets statuses settle before it
// sends one: an agent going through several quick steps (hooks that run in
// milliseconds, or none) reports where it ends up, not each step, and each
// report spared is a transaction and a history entry spared.
const statusLinger = 200 * time.Millisecond

// reporter tells the controller the agent's status: the latest one wins,
// and while the controller cannot be reached the latest waits and is sent
// when it can. A status worth keeping in the unit's history (an error, or
// one carrying a hook's output) is sent even when a later one follows
// quickly. The controller's copy is for ctl status; the local state file
// is what counts.
type reporter struct {
	api    API
	unit   string
	logger hclog.Logger

	mu   sync.Mutex
	want *pb.Status // latest status to report
	// keep are statuses set before want that must still be sent, in order.
	keep    []*pb.Status
	sent    *pb.Status // last status the controller acknowledged
	pending chan struct{}
	done    chan struct{}
}

// maxKept bounds the statuses kept for sending: beyond it the oldest go.
const maxKept = 16

// worthKeeping says whether st must reach the unit's history even when a
// later status follows at once.
func worthKeeping(st *pb.Status) bool {
	return st != nil && (st.Status == "error" || st.Data["output"] != "")
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
	if worthKeeping(r.want) && !proto.Equal(r.want, r.sent) {
		r.keep = append(r.keep, r.want)
		if len(r.keep) > maxKept {
			r.keep = r.keep[1:]
		}
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
		done := len(r.keep) == 0 && proto.Equal(r.want, r.sent)
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
		r.mu.Lock()
		urgent := len(r.keep) > 0 || worthKeeping(r.want)
		r.mu.Unlock()
		if !urgent && !sleep(ctx, statusLinger) {
			return
		}
		for {
			r.mu.Lock()
			st, kept := r.want, len(r.keep) > 0
			if kept {
				st = r.keep[0]
			}
			sent := !kept && proto.Equal(st, r.sent)
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
				if kept {
					r.keep = r.keep[1:]
				}
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

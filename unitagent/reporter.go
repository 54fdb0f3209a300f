package unitagent

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// statusLinger is how long the reporter lets statuses settle before it
// sends one: an agent going through several quick steps (hooks that run in
// milliseconds, or none) reports where it ends up, not each step, and each
// report spared is a transaction and a history entry spared.
const statusLinger = 200 * time.Millisecond

// progressEvery spaces a unit's reports of the hook it runs: a report
// that only says the agent runs another hook (the controller shows it
// executing already) waits until this long after the last report, and
// meanwhile the latest replaces it. A unit whose hooks queue for its
// machine's hook lock reports each hook otherwise, and the unit of a
// service related to thousands runs hooks for minutes. Any other report
// (executing after idle or an error, idle, an error, a hook's output) is
// not held back.
const progressEvery = 2 * time.Second

// progressPace spaces progress reports by how long the controller took to
// acknowledge the last report, this many times over, when that is longer
// than progressEvery: a controller answering in a second hears of a
// unit's next hook 10 s later, not 2. Slowed by load, hooks take longer,
// each outlasts the spacing and is reported, and the reports add to the
// load; paced, they do not.
const progressPace = 10

// reporter tells the controller the agent's status: the latest one wins,
// and while the controller cannot be reached the latest waits and is sent
// when it can. A status worth keeping in the unit's history (an error, or
// one carrying a hook's output) is sent even when a later one follows
// quickly. A change of the agent's status (executing, idle, error) is
// always sent; only a report that names another hook while the
// controller shows the agent executing already is progress, paced and
// declinable. The controller's copy is for ctl status and ctl wait; the
// local state file is what counts.
type reporter struct {
	api    API
	unit   string
	logger hclog.Logger

	// progressEvery is the package's, but for tests.
	progressEvery time.Duration

	mu   sync.Mutex
	want *pb.Status // latest status to report
	// keep are statuses set before want that must still be sent, in order.
	keep []*pb.Status
	sent *pb.Status // last status the controller acknowledged
	// declined is the last progress report the controller declined, busy:
	// not sent again, a later report replaces it.
	declined *pb.Status
	lastSeq  int64 // the seq of the last status set
	// wantProgress says want names the hook the agent runs (or waits to
	// run): progress, once the controller shows the agent executing;
	// sentAt is when the last report was acknowledged (or declined),
	// sentTook how long that took.
	wantProgress bool
	sentAt       time.Time
	sentTook     time.Duration
	// sending is the status on its way to the controller, if any; held
	// the progress report waiting for its pace (progressHold), if any.
	sending *pb.Status
	held    *pb.Status
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
	return &reporter{api: api, unit: unit, logger: logger, progressEvery: progressEvery,
		pending: make(chan struct{}, 1), done: make(chan struct{}, 1)}
}

// progress is set for a status that names the hook the agent runs (or
// waits to run). The first of a run of hooks, after any other status, is
// reported as any status is: the unit shows executing. The next ones only
// name another hook, and go no more often than every progressEvery.
func (r *reporter) progress(st *pb.Status) { r.setStatus(st, true) }

// isProgress says whether want, set by progress, only names another hook
// while the controller's copy already shows the same agent status. r.mu
// is held.
func (r *reporter) isProgress() bool {
	return r.wantProgress && r.sent != nil && r.want != nil && r.sent.Status == r.want.Status
}

// progressEnded says the hook that progress named has ended. Its report,
// if not sent yet, is dropped when the controller already shows the agent
// executing: it would say that a hook runs which no longer does, one
// transaction a hook for a unit whose hooks queue for the machine's hook
// lock. The first report of a run of hooks, after idle, stays: it shows
// that the unit is executing.
func (r *reporter) progressEnded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.isProgress() && len(r.keep) == 0 && r.want != r.sending && !proto.Equal(r.want, r.sent) {
		r.want = r.sent
	}
}

// set records the status to report; an unchanged one is not sent again.
// It stamps the status with a seq (pb.Status.Seq) that orders this
// agent's reports, so that a report the agent gave up waiting for cannot
// overwrite a newer one at the controller.
func (r *reporter) set(st *pb.Status) { r.setStatus(st, false) }

// setStatus is set, or progress when progress is set.
func (r *reporter) setStatus(st *pb.Status, progress bool) {
	r.mu.Lock()
	if sameReport(st, r.want) {
		r.mu.Unlock()
		return
	}
	if worthKeeping(r.want) && !proto.Equal(r.want, r.sent) {
		r.keep = append(r.keep, r.want)
		if len(r.keep) > maxKept {
			r.keep = r.keep[1:]
		}
	}
	if r.sending == nil && len(r.keep) == 0 && sameReport(st, r.sent) {
		// Back to what the controller has, with nothing on its way that
		// it must overtake (a hook run over before it was reported):
		// nothing to send.
		r.want, r.wantProgress = r.sent, false
		r.mu.Unlock()
		return
	}
	st = proto.Clone(st).(*pb.Status)
	r.lastSeq = max(time.Now().UnixNano(), r.lastSeq+1)
	st.Seq = r.lastSeq
	r.want, r.wantProgress = st, progress
	r.mu.Unlock()
	select {
	case r.pending <- struct{}{}:
	default:
	}
}

// sameReport says whether a and b report the same, whatever their seqs.
func sameReport(a, b *pb.Status) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Seq == b.Seq {
		return proto.Equal(a, b)
	}
	c := proto.Clone(b).(*pb.Status)
	c.Seq = a.Seq
	return proto.Equal(a, c)
}

// flush waits, briefly, for the latest status to be acknowledged.
func (r *reporter) flush(ctx context.Context) { r.wait(ctx, false) }

// flushKept waits, briefly, for the statuses worth keeping to be
// acknowledged: any other may go unsent.
func (r *reporter) flushKept(ctx context.Context) { r.wait(ctx, true) }

func (r *reporter) wait(ctx context.Context, keptOnly bool) {
	deadline := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		done := len(r.keep) == 0 && (r.settled(r.want) || keptOnly && !worthKeeping(r.want))
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

// settled says whether st needs no sending: the controller has it, or
// declined it as progress. r.mu is held.
func (r *reporter) settled(st *pb.Status) bool {
	return proto.Equal(st, r.sent) || st != nil && st == r.declined
}

// urgent says whether what is to be sent goes without lingering: statuses
// worth keeping.
func (r *reporter) urgent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keep) > 0 || worthKeeping(r.want)
}

// progressHold is how long a progress report waits yet, since after the
// last report was acknowledged (or declined), which took took: it goes
// every after that, or progressPace times took after it, whichever is
// later.
func progressHold(every, took, since time.Duration) time.Duration {
	return max(every, progressPace*took) - since
}

func (r *reporter) run(ctx context.Context) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(10*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.pending:
		}
		if !r.urgent() && !pause.For(ctx, statusLinger) {
			return
		}
		for {
			r.mu.Lock()
			st, kept := r.want, len(r.keep) > 0
			if kept {
				st = r.keep[0]
			}
			sent := !kept && r.settled(st)
			progress := !kept && r.isProgress()
			var hold time.Duration
			if progress {
				hold = progressHold(r.progressEvery, r.sentTook, time.Since(r.sentAt))
			}
			r.held = nil
			if !sent && st != nil {
				if hold <= 0 {
					r.sending = st
				} else {
					r.held = st
				}
			}
			r.mu.Unlock()
			if sent || st == nil {
				break
			}
			if hold > 0 {
				// Progress too soon after the last report: wait,
				// unless something else is set meanwhile, which
				// lingers as usual.
				t := time.NewTimer(hold)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				case <-r.pending:
					t.Stop()
					if !r.urgent() && !pause.For(ctx, statusLinger) {
						return
					}
				}
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			called := time.Now()
			_, err := r.api.SetUnitStatus(cctx, &pb.SetUnitStatusRequest{Unit: r.unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: st, Progress: progress})
			cancel()
			r.mu.Lock()
			r.sending = nil
			r.mu.Unlock()
			// A progress report the controller declined, busy, counts
			// as sent but for the controller's copy: paced the same,
			// and replaced by the next report.
			declined := progress && status.Code(err) == codes.ResourceExhausted
			if err == nil || declined {
				bo.Reset()
				r.mu.Lock()
				if declined {
					r.declined = st
				} else {
					r.sent = st
				}
				r.sentAt = time.Now()
				r.sentTook = r.sentAt.Sub(called)
				if kept || len(r.keep) > 0 && r.keep[0] == st {
					// Sent from the queue, or queued by set while it was
					// on its way: either way, sent once.
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
			if !pause.For(ctx, bo.NextBackOff()) {
				return
			}
		}
	}
}

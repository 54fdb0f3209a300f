package machineagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/pause"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// UnitCredential is the credential a unit agent calls the controller with
// and follows its subjects as, as its machine agent keeps it. The
// controller stops accepting it once IssueUnitCredentials is asked for the
// unit again (by this machine's agent restarted, or by anyone else holding
// the machine's credential). A call or subscription refused with it as
// Unauthenticated (Refused) has the machine agent ask for a new one, which
// the unit agent goes on with at once: its calls carry it from then on
// (apiclient.AsRenewable), its refused subscriptions are made again with
// it (agentwatch.Mux.ForRenewableAgent), and nothing else of it restarts: not
// its hook in flight, not its local state.
//
// Renewals of one unit are spaced by a pause that grows, from a second to
// five minutes, while the refusals keep coming, and starts over after five
// minutes without one: whoever keeps issuing the unit's credential cannot
// make its machine agent ask for one as often. When a new credential
// cannot be had, the unit's agent status says so (unauthenticated, with
// the reason) until one can: the unit agent's own reports, which go
// through the machine agent, are sent so changed meanwhile.
type UnitCredential struct {
	unit string
	// renew has a renewal to make; it has room for one.
	renew chan struct{}

	mu   sync.Mutex
	cred pki.Credential
	// refused says the controller refused cred: a new one is wanted.
	refused bool
	// stuck is why a new credential could not be had, nil while the one
	// held is not known to be refused or a new one was had since.
	stuck error
	// report is the unit agent's last report of its agent status, as it
	// made it (the unit agent's own, never changed here): sent again once
	// the unit is no longer stuck. seq is the seq of the last report the
	// machine agent made for the unit, which the next must pass.
	report *pb.SetUnitStatusRequest
	seq    int64
}

func newUnitCredential(unit string, cred pki.Credential) *UnitCredential {
	return &UnitCredential{unit: unit, cred: cred, renew: make(chan struct{}, 1)}
}

// Current is the credential a call or subscription made now carries.
func (c *UnitCredential) Current() pki.Credential {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cred
}

// Refused says that the controller refused cred as Unauthenticated: when
// it is the credential held, a new one is asked for. A refusal of one
// already replaced is ignored.
func (c *UnitCredential) Refused(cred pki.Credential) {
	c.mu.Lock()
	current := cred == c.cred
	if current {
		c.refused = true
	}
	c.mu.Unlock()
	if !current {
		return
	}
	select {
	case c.renew <- struct{}{}:
	default:
	}
}

// renewCalm is how long a unit's credential goes unrefused before its
// renewals are no longer spaced.
const renewCalm = 5 * time.Minute

// renewUnitCredentials has a new credential issued for c's unit each time
// the controller refuses the one it holds, until ctx ends. It reports the
// unit unauthenticated while a new one cannot be had.
func (a *Agent) renewUnitCredentials(ctx context.Context, c *UnitCredential) {
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(time.Second), backoff.WithMaxInterval(5*time.Minute), backoff.WithMaxElapsedTime(0))
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.renew:
		}
		c.mu.Lock()
		wanted := c.refused
		c.mu.Unlock()
		if !wanted {
			continue // a refusal of a credential replaced since
		}
		if !last.IsZero() {
			if time.Since(last) > renewCalm {
				bo.Reset()
			} else if !pause.For(ctx, bo.NextBackOff()) {
				return
			}
		}
		// Credentials are issued only to the instance present: while it
		// reconnects, the controller would refuse.
		select {
		case <-a.whenPresent():
		case <-ctx.Done():
			return
		}
		last = time.Now()
		creds, err := a.issueCredentials(ctx, []string{c.unit})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			a.logger.Info("the controller refused the unit's credential: a new one was issued", "unit", c.unit)
			a.renewed(ctx, c, creds[0])
			continue
		}
		a.logger.Warn("the controller refuses the unit's credential, and a new one cannot be issued", "unit", c.unit, "error", err)
		switch status.Code(err) {
		case codes.NotFound, codes.PermissionDenied:
			// The unit is gone, or no longer this machine's: its agent
			// stops once its watch shows it. Nothing to report.
		default:
			a.stuck(ctx, c, err)
		}
		select { // try again, after the pause
		case c.renew <- struct{}{}:
		default:
		}
	}
}

// renewed puts cred in c's place and, if the unit was reported
// unauthenticated, has its agent's last report sent again as it made it.
func (a *Agent) renewed(ctx context.Context, c *UnitCredential, cred pki.Credential) {
	c.mu.Lock()
	c.cred, c.refused = cred, false
	wasStuck := c.stuck != nil
	c.stuck = nil
	var again *pb.SetUnitStatusRequest
	if wasStuck && c.report != nil {
		again = proto.Clone(c.report).(*pb.SetUnitStatusRequest)
		again.Status.Seq = nextSeq(max(c.report.Status.GetSeq(), c.seq))
		c.seq = again.Status.Seq
	}
	c.mu.Unlock()
	if again != nil {
		a.sendUnitStatus(ctx, c, again)
	}
}

// stuck records why c's unit cannot have a new credential and reports it
// unauthenticated, unless it has for the same reason already.
func (a *Agent) stuck(ctx context.Context, c *UnitCredential, why error) {
	c.mu.Lock()
	if c.stuck != nil && statusMessage(c.stuck) == statusMessage(why) {
		c.mu.Unlock()
		return
	}
	c.stuck = why
	var req *pb.SetUnitStatusRequest
	if c.report != nil {
		req = proto.Clone(c.report).(*pb.SetUnitStatusRequest)
	} else {
		req = &pb.SetUnitStatusRequest{Unit: c.unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: &pb.Status{}}
	}
	req.Status.Seq = nextSeq(max(req.Status.GetSeq(), c.seq))
	c.seq = req.Status.Seq
	req = c.asStuckLocked(req)
	c.mu.Unlock()
	a.sendUnitStatus(ctx, c, req)
}

// asStuckLocked returns the unit agent's report req as it is sent while
// the unit is stuck: unauthenticated, saying why, with the state and any
// hook output it carries. c.mu is held.
func (c *UnitCredential) asStuckLocked(req *pb.SetUnitStatusRequest) *pb.SetUnitStatusRequest {
	if c.stuck == nil {
		return req
	}
	out := proto.Clone(req).(*pb.SetUnitStatusRequest)
	out.Status.Status = "unauthenticated"
	out.Status.Message = fmt.Sprintf("the controller refuses the unit agent's credential and its machine cannot have a new one issued: %s", statusMessage(c.stuck))
	out.Progress = false
	return out
}

// sendUnitStatus sends a report of c's unit's agent status with the
// unit agents' reports, trying a few times.
func (a *Agent) sendUnitStatus(ctx context.Context, c *UnitCredential, req *pb.SetUnitStatusRequest) {
	own := func(context.Context) error {
		return status.Error(codes.Unauthenticated, "the unit's own credential is refused")
	}
	for i := 0; i < 5; i++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.statuses.do(cctx, req, own)
		cancel()
		if err == nil || ctx.Err() != nil || errors.Is(err, errSuperseded) {
			return
		}
		a.logger.Debug("cannot report the unit's status yet", "unit", c.unit, "error", err)
		if !pause.For(ctx, time.Second) {
			return
		}
	}
}

// statusMessage is the sentence of the gRPC status err carries, or err's
// own.
func statusMessage(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return err.Error()
}

// nextSeq is a report's seq after one of seq: the agent's reports carry
// nanoseconds of its clock, and one made by the machine agent for it must
// order after the report it replaces.
func nextSeq(seq int64) int64 { return max(time.Now().UnixNano(), seq+1) }

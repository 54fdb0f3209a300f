package unitagent

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// checkScopes marks as entered each scope the controller says the unit is
// in. The agent does not save its mark of entering one on its own
// (actEnterScope), and a unit that lost it to a crash would otherwise
// never leave the scope when the relation, or the unit, dies, nor the
// relation go. So an agent that starts over files it did not make asks
// first (Run). It asks until the controller answers or ctx ends; a
// controller that refuses (the unit gone, or a controller without
// UnitScopes) leaves the state as it is. The marks go with the next
// record, like the one they replace: lost again, they are asked for again.
func (a *Agent) checkScopes(ctx context.Context) error {
	var resp *pb.UnitScopesResponse
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var err error
		resp, err = a.cfg.API.UnitScopes(cctx, &pb.UnitScopesRequest{Unit: a.cfg.Unit})
		cancel()
		switch status.Code(err) {
		case codes.OK:
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal:
			a.logger.Warn("cannot ask the controller which scopes the unit is in; trying again", "error", err)
			if !pause.For(ctx, wait) {
				return ctx.Err()
			}
			continue
		default:
			a.logger.Warn("the controller did not say which scopes the unit is in", "error", err)
			return nil
		}
		break
	}
	changed := false
	for _, sc := range resp.GetScopes() {
		lr := a.l.Relations[sc.GetRelation()]
		if lr == nil {
			// Not even relation-created's record is left: it ran, since
			// the unit entered after it.
			a.l.createRelation(sc.GetRelation(), sc.GetEndpoint())
			lr = a.l.Relations[sc.GetRelation()]
		}
		if !lr.InScope || lr.Left {
			a.logger.Info("in a relation's scope, as the controller says", "relation", sc.GetRelation())
			lr.InScope, lr.Entering, lr.Left = true, false, false
			changed = true
		}
	}
	if changed {
		return a.record(commitLazy)
	}
	return nil
}

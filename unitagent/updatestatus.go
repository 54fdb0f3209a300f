package unitagent

import (
	"math/rand/v2"
	"time"
)

// update-status runs every interval (the controller's
// --update-status-interval, 5 minutes by default) on a started unit with
// nothing else to do: it is the resolver's last choice, so it never runs
// while another hook is due. Each unit's first comes at a random point of
// its first interval and each next one an interval later, give or take a
// tenth, so that ten thousand units started together do not run it
// together. It is periodic, not owed: an update-status op saved when the
// agent stopped is dropped on its next start (dropUpdateStatus), and its
// schedule starts afresh.
type updateStatus struct {
	every time.Duration
	at    time.Time // zero: never
}

func newUpdateStatus(every time.Duration, now time.Time) *updateStatus {
	u := &updateStatus{every: every}
	if every > 0 {
		u.at = now.Add(time.Duration(rand.Int64N(int64(every))))
	}
	return u
}

// decided moves the schedule on once the resolver chose update-status.
func (u *updateStatus) decided(act action, now time.Time) {
	if u.every <= 0 || act.kind != actHook || act.op == nil || act.op.Hook != "update-status" {
		return
	}
	tenth := int64(u.every / 10)
	u.at = now.Add(u.every - time.Duration(tenth) + time.Duration(rand.Int64N(2*tenth+1)))
}

// updateStatusAction is what a started unit with nothing else to do
// does: update-status when due, else wait for changes or for it.
func updateStatusAction(r *modelView, now time.Time) action {
	if r.updateStatusAt.IsZero() {
		return action{kind: actWait, why: "changes"}
	}
	if !now.Before(r.updateStatusAt) {
		return hook(&hookOp{Hook: "update-status"})
	}
	return action{kind: actWait, why: "changes", until: r.updateStatusAt}
}

// dropUpdateStatus forgets an update-status op the agent saved before it
// stopped, unless it failed into an error state (the operator resolves
// that as any hook's failure).
func dropUpdateStatus(l *localState) {
	if op := l.Op; op != nil && op.Hook == "update-status" && !l.inError() {
		l.Op = nil
	}
}

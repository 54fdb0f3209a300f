package unitagent

// The leadership hooks, in Juju's order: after install (and the
// relations' relation-created), before config-changed and start, a new
// unit runs leader-elected when it leads and leader-settings-changed
// when it does not; after that, leader-elected whenever the unit becomes
// its service's leader, and leader-settings-changed on a unit that does
// not lead whenever the leader settings' version moves or the unit stops
// leading. What ran is recorded with the hook's success (applyLeadership),
// in the same save as the hook's end, so that a crash runs a hook again
// at most (as it does any hook), and never loses one.

// leadershipAction returns the leadership hook due, if any. It waits for
// the leadership's watches to have answered.
func leadershipAction(l *localState, r *modelView, self string) (action, bool) {
	if !r.leaderKnown || !r.leaderSettingsKnown {
		return action{kind: actWait, why: "the service's leadership", catchUp: true}, true
	}
	if r.leader == self {
		if !l.Leader {
			return hook(&hookOp{Hook: "leader-elected"}), true
		}
		return action{}, false
	}
	if l.Leader || !l.LeaderSeen || l.LeaderSettings != r.leaderVersion {
		return hook(&hookOp{Hook: "leader-settings-changed", Version: r.leaderVersion}), true
	}
	return action{}, false
}

// applyLeadership records a leadership hook's success.
func applyLeadership(l *localState, op *hookOp) {
	l.LeaderSeen = true
	switch op.Hook {
	case "leader-elected":
		l.Leader = true
	case "leader-settings-changed":
		l.Leader, l.LeaderSettings = false, op.Version
	}
}

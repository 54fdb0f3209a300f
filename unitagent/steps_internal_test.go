package unitagent

import "testing"

// TestEveryStepHasAClass: each kind of step the resolver decides, and the
// host job, has a row in the step table, and only the steps the agent can
// do again at no cost that matters commit lazily; a hook's end alone is
// written unsynced.
func TestEveryStepHasAClass(t *testing.T) {
	for k := actWait; k <= actHostJob; k++ {
		c, ok := stepClasses[k]
		if !ok {
			t.Errorf("stepClasses[%d] missing", k)
			continue
		}
		if k != actHook && (c.prepared == commitWritten || c.executed == commitWritten || c.done == commitWritten) {
			t.Errorf("stepClasses[%d] = %+v: only a hook's end is written unsynced", k, c)
		}
		if k != actHook && k != actHostJob && k != actExit && k != actWait && c.before != barrierSync {
			t.Errorf("stepClasses[%d].before = %d, want barrierSync: a hook's end is synced before the agent acts outside its hooks", k, c.before)
		}
	}
	if n := len(stepClasses); n != int(actHostJob)+1 {
		t.Errorf("%d rows in stepClasses, want %d", n, actHostJob+1)
	}
	tests := []struct {
		act  action
		op   *hookOp
		want stepClass
	}{
		{action{kind: actHook, op: &hookOp{Hook: "install"}}, nil, stepClasses[actHook]},
		{action{kind: actHook, op: &hookOp{Hook: opHostClaims}}, nil, stepClasses[actHostJob]},
		{action{kind: actHook}, &hookOp{Hook: opHostRelease}, stepClasses[actHostJob]},
		{action{kind: actHook}, &hookOp{Hook: "stop"}, stepClasses[actHook]},
		{action{kind: actEnterScope}, &hookOp{Hook: opHostDaemons}, stepClasses[actEnterScope]},
	}
	for _, tt := range tests {
		if got := classOf(tt.act, tt.op); got != tt.want {
			t.Errorf("classOf(%v, %v) = %+v, want %+v", tt.act, tt.op, got, tt.want)
		}
	}
}

package controller

import (
	"fmt"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// BenchmarkRolloutPlan is one pass's planning over the picture of a
// 10,000-unit service on 1,000 machines, rolling out with max-parallel
// 10%: a third of the units done, the permits all out, half their units
// healthy and released this pass. The plan is what a pass does without
// etcd; it must stay well under the pass interval (200 ms).
func BenchmarkRolloutPlan(b *testing.B) {
	const units, machines = 10_000, 1_000
	w := &RolloutWorker{cfg: RolloutWorkerConfig{GateAsks: DefaultRolloutGateAsks, Backoff: DefaultRolloutBackoff, MaxBackoff: DefaultRolloutMaxBackoff}}
	pic := newRolloutPicture()
	now := time.Now()
	pic.rollouts["kv"] = &pb.Rollout{Service: "kv", Head: 2, Target: 2, Previous: 1, State: pb.RolloutState_ROLLOUT_STATE_ROLLING,
		DeadlineUnixNano: now.Add(time.Hour).UnixNano(), Permits: units / 10}
	pic.policies["kv"] = &pb.RolloutPolicy{MaxParallel: "10%", DeadlineMs: time.Hour.Milliseconds(), AutoRevert: true}
	for m := range machines {
		pic.present[fmt.Sprint(m)] = true
	}
	sp := &servicePicture{}
	for i := range units {
		u := &unitPicture{name: fmt.Sprintf("kv/%d", i), num: int64(i), exists: true, machine: fmt.Sprint(i % machines),
			hasRev: true, current: 1, target: 1, agent: "idle", workload: "active"}
		switch {
		case i < units/3:
			u.current, u.target = 2, 2
		case i < units/3+units/10:
			u.target, u.permit = 2, 2
			if i%2 == 0 {
				u.current = 2
			}
		}
		pic.units[u.name] = u
		sp.units = append(sp.units, u)
	}
	pic.services["kv"] = sp
	b.ResetTimer()
	for range b.N {
		t := newRolloutTerm(w, pic)
		plans, _ := t.plan(now)
		if len(plans) != 1 || len(plans[0].release) != units/20 || len(plans[0].grant) != 0 {
			b.Fatalf("plans %v", plans)
		}
	}
}

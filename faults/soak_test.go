package faults

import (
	"fmt"
	"testing"
	"time"
)

// scenarios are the fault scenarios, in the order the soak loops them.
var scenarios = []struct {
	name string
	run  func(*testing.T, sizes)
}{
	{"EtcdLeaderLoss", runEtcdLeaderLoss},
	{"MachineAgentsKilled", runMachineAgentsKilled},
	{"PartitionedAgents", runPartitionedAgents},
	{"FuzzOperatorAPI", runFuzzOperatorAPI},
	{"ControllerFailover", runControllerFailover},
	{"ConnectionFlood", runConnectionFlood},
	{"SlowWatchReaders", runSlowWatchReaders},
	{"TeardownSoak", runTeardownSoak},
	{"QuotaAttack", runQuotaAttack},
}

// soakMaxFailures ends a soak early: the failures so far are the evidence.
const soakMaxFailures = 3

// TestSoak loops the scenarios, at the short sizes (or the full ones, with
// -faults.full), one after the other, each run a subtest with a sandbox of
// its own, until -faults.soak has passed; it starts no run once the test
// binary's deadline is less than half an hour away.
func TestSoak(t *testing.T) {
	if *soakFlag == 0 {
		t.Skip("no -faults.soak")
	}
	sz := currentSizes()
	sz.form = "soak, " + sz.form
	end := time.Now().Add(*soakFlag)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Minute).Before(end) {
		end = d.Add(-30 * time.Minute)
		t.Logf("the test binary's deadline cuts the soak to %s", time.Until(end).Round(time.Minute))
	}
	failures := 0
	for i := 0; time.Now().Before(end) && failures < soakMaxFailures; i++ {
		sc := scenarios[i%len(scenarios)]
		if !t.Run(fmt.Sprintf("%s/%d", sc.name, i/len(scenarios)+1), func(t *testing.T) { sc.run(t, sz) }) {
			failures++
		}
	}
}

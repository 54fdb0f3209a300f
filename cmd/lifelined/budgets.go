package main

import (
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/state"
)

// budgetFlags are the controller's limits and budgets: what one agent may
// write, and how the embedded etcd member's database is kept within its
// quota (docs/RELIABILITY.md, "Limits and budgets").
type budgetFlags struct {
	etcdQuota   string
	etcdHistory int64
	agentWrites float64
	agentBurst  int
	agentBytes  string
	charmStore  string
}

func (l *budgetFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&l.etcdQuota, "etcd-quota-bytes", "2GiB", "the embedded etcd member's quota: past it etcd refuses writes (the controller refuses writes that add to the model once within a tenth of it)")
	fl.Int64Var(&l.etcdHistory, "etcd-history-revisions", embedetcd.DefaultHistory, "revisions of history the embedded etcd member keeps for watches to resume from; the controller compacts what is older (all of it while the database holds half its quota)")
	fl.Float64Var(&l.agentWrites, "agent-writes-per-second", controller.DefaultAgentWrites, "calls that write each agent credential may make a second; 0 for no limit")
	fl.IntVar(&l.agentBurst, "agent-write-burst", controller.DefaultAgentBurst, "calls that write each agent credential may make at once")
	fl.StringVar(&l.agentBytes, "agent-write-bytes-per-minute", byteSizeFlag(controller.DefaultAgentBytes), "bytes each agent credential's calls may write to etcd a minute; 0 or none for no limit")
	fl.StringVar(&l.charmStore, "charm-store-limit", byteSizeFlag(state.DefaultCharmStoreLimit), "bytes of charm archives the model stores (revisions no service uses go, but the latest of each charm); 0 or none for no limit")
}

// validate checks the flags; external says the model is in an external
// etcd cluster.
func (l *budgetFlags) validate(external bool, set func(string) bool) error {
	if external {
		for _, name := range []string{"etcd-quota-bytes", "etcd-history-revisions"} {
			if set(name) {
				return fmt.Errorf("--%s is for the embedded etcd member: configure an external cluster's own", name)
			}
		}
	}
	q, err := parseSizeFlag("--etcd-quota-bytes", l.etcdQuota, false)
	if err != nil {
		return err
	}
	if q < 1<<20 {
		return fmt.Errorf("--etcd-quota-bytes %s: want at least 1MiB", l.etcdQuota)
	}
	if l.etcdHistory < 0 {
		return fmt.Errorf("--etcd-history-revisions %d: want 0 or more", l.etcdHistory)
	}
	if l.agentWrites < 0 || math.IsNaN(l.agentWrites) || math.IsInf(l.agentWrites, 0) {
		return fmt.Errorf("--agent-writes-per-second %g: want 0 (no limit) or more", l.agentWrites)
	}
	if l.agentBurst < 1 {
		return fmt.Errorf("--agent-write-burst %d: want 1 or more", l.agentBurst)
	}
	if _, err := parseSizeFlag("--agent-write-bytes-per-minute", l.agentBytes, true); err != nil {
		return err
	}
	if _, err := parseSizeFlag("--charm-store-limit", l.charmStore, true); err != nil {
		return err
	}
	return nil
}

// charmStoreLimit is state.Config.CharmStoreLimit. The flags are valid.
func (l *budgetFlags) charmStoreLimit() int64 {
	n, _ := parseSizeFlag("", l.charmStore, true)
	return n
}

// quota is the embedded member's quota. The flags are valid.
func (l *budgetFlags) quota() int64 {
	n, _ := parseSizeFlag("", l.etcdQuota, false)
	return n
}

// budgets are the agents' budgets. The flags are valid.
func (l *budgetFlags) budgets() controller.Budgets {
	b := controller.Budgets{Writes: l.agentWrites, Burst: l.agentBurst}
	if b.Writes == 0 {
		b.Writes = -1
	}
	b.Bytes, _ = parseSizeFlag("", l.agentBytes, true)
	return b
}

// history is the revisions the embedded member keeps: --etcd-history-revisions,
// where 0 keeps none beyond the watch hub's revision.
func (l *budgetFlags) history() int64 {
	if l.etcdHistory == 0 {
		return -1
	}
	return l.etcdHistory
}

// byteSizeFlag writes a size as parseSizeFlag reads it.
func byteSizeFlag(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

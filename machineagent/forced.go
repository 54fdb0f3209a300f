package machineagent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/unitagent"
)

// Units forced out.
//
// The controller's cleaner removes a forced unit's records itself
// (destroy --force), while its agent here may still run, and its hooks
// may have left daemons running. The agent ends such a unit on the host:
// it stops the unit's agent (which kills the hook it runs, if any), ends
// every process of the unit's session (hooks.StopSession: whatever its
// hooks started carries the session's mark, the unit's directory), then
// removes the unit's files. A unit is known forced out when:
//
//   - a principal is no longer assigned to the machine while its agent
//     runs (the agent removes its dead principals itself, U5), or its
//     agent stops on it forced out (unitagent.ErrForcedOut): removeDead;
//   - a subordinate's agent stops on it forced out, its principal is
//     gone, or its principal's agent tells subordinates without it
//     (unitagent.Deployer.Subordinates) or recalls it dead
//     (unitagent.Deployer.Recall, which ends it the same way);
//   - its directory, found when the agent starts, belongs to no assigned
//     principal and to no subordinate that the agents of the assigned
//     principals tell, once each has told: the unit went while the agent
//     was away.
//
// The daemons its claims run are not in its session (the supervisor
// starts them): they are stopped, and the files its claims wrote removed,
// with its package claims released (cleanHost), before its directory,
// which holds the record of those files, goes.
//
// Its files go only once its processes are gone: when the agent stops
// first, the next start finds the directory and ends the unit again. A
// machine made dead with its units (destroy-machine --force) has its
// agent end them before it stops, for a minute at most (deadWait).

// forgone marks the units forced out for the ender: the principals no
// longer assigned while their agents run, the subordinates of principals
// gone or that no longer tell them, and the directories left from before
// the agent started whose units nobody claims.
func (a *Agent) forgone(want map[string]bool) {
	if !a.looked {
		a.looked = true
		a.leftovers = a.unitDirs()
	}
	a.mu.Lock()
	for p := range a.subs {
		if !want[p] {
			delete(a.subs, p)
		}
	}
	told := map[string]bool{}
	for _, subs := range a.subs {
		for _, s := range subs {
			told[s] = true
		}
	}
	var gone []string
	for name, w := range a.workers {
		switch {
		case w.going:
		case w.principal && !want[name] && !w.dead:
			a.logger.Info("unit is no longer assigned: ending it", "unit", name)
			gone = append(gone, name)
		case !w.principal && !want[w.owner]:
			a.logger.Info("subordinate's principal is gone: ending it", "unit", name, "principal", w.owner)
			gone = append(gone, name)
		case !w.principal && !slices.Contains(a.subs[w.owner], name) && a.subs[w.owner] != nil:
			a.logger.Info("subordinate was removed: ending it", "unit", name, "principal", w.owner)
			gone = append(gone, name)
		}
	}
	// A leftover is placed once its unit is assigned, runs, or is told;
	// it is nobody's once every assigned principal whose agent runs has
	// told its subordinates.
	allTold := true
	for p := range want {
		if w := a.workers[p]; a.subs[p] == nil && !a.removed[p] && (w == nil || !w.dead) {
			allTold = false
		}
	}
	for name := range a.leftovers {
		if _, runs := a.workers[name]; want[name] || runs || told[name] {
			delete(a.leftovers, name)
		} else if allTold {
			a.logger.Info("unit left from before the agent started is gone: ending it", "unit", name)
			delete(a.leftovers, name)
			gone = append(gone, name)
		}
	}
	a.mu.Unlock()
	for _, name := range gone {
		a.end(name)
	}
}

// unitDirs returns the units whose directories are under units/.
func (a *Agent) unitDirs() map[string]bool {
	entries, err := os.ReadDir(filepath.Join(a.cfg.DataDir, "units"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.logger.Warn("cannot read the units' directories", "error", err)
		}
		return nil
	}
	out := map[string]bool{}
	for _, e := range entries {
		i := strings.LastIndexByte(e.Name(), '-')
		if !e.IsDir() || i < 0 {
			continue
		}
		if unit := e.Name()[:i] + "/" + e.Name()[i+1:]; names.ValidUnit(unit) {
			out[unit] = true
		}
	}
	return out
}

// end has the ender end unit: its worker, if any, is marked going, so
// that nothing else stops or restarts it meanwhile, and the machine is not
// idle until it is done.
func (a *Agent) end(unit string) {
	a.mu.Lock()
	w := a.workers[unit]
	if w == nil {
		w = &worker{cancel: func() {}, done: closedChan()}
		a.workers[unit] = w
	}
	if !w.going {
		w.going = true
		a.ending = append(a.ending, unit)
	}
	a.mu.Unlock()
	select {
	case a.endWake <- struct{}{}:
	default:
	}
}

// endDone forgets a unit the ender has ended.
func (a *Agent) endDone(unit string) {
	a.mu.Lock()
	if w := a.workers[unit]; w != nil && w.going {
		delete(a.workers, unit)
	}
	a.mu.Unlock()
}

// runEnder ends the units marked going, those marked together in one
// batch: their agents stopped, the processes of their sessions ended at
// once (one look through the host's processes at a time, whatever the
// number of units), their files removed. It reports each unit on ended.
func (a *Agent) runEnder(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.endWake:
		}
		a.mu.Lock()
		batch := a.ending
		a.ending = nil
		workers := make([]*worker, len(batch))
		for i, u := range batch {
			workers[i] = a.workers[u]
		}
		a.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		for _, w := range workers {
			w.cancel()
		}
		for _, w := range workers {
			<-w.done
		}
		// Processes left (ctx ended, or they outlived SIGKILL) keep the
		// units' directories, by which the next start ends them again.
		stopped := a.stopSessions(ctx, batch)
		if ctx.Err() != nil {
			return
		}
		for _, u := range batch {
			if stopped && a.cleanHost(ctx, u) {
				if err := removeTree(a.unitDir(u), unitagent.DataFiles...); err != nil {
					a.logger.Warn("cannot remove unit files", "unit", u, "error", err)
				}
			}
			select {
			case a.ended <- u:
			case <-ctx.Done():
				return
			}
		}
	}
}

// stopSessions ends the processes of units' sessions (a principal's
// holds its subordinates', even those whose agents finished), and reports
// whether none is left.
func (a *Agent) stopSessions(ctx context.Context, units []string) bool {
	marks := make([]string, len(units))
	for i, u := range units {
		marks[i] = a.unitDir(u)
	}
	n, err := hooks.StopSession(ctx, marks, 0)
	if n > 0 {
		a.logger.Info("ended the processes of units forced out", "units", units, "processes", n)
	}
	if err != nil {
		a.logger.Warn("cannot end the processes of units forced out", "units", units, "error", err)
		return false
	}
	return true
}

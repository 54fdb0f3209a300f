package machineagent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// The unit agents the machine agent runs: starting and stopping them,
// what happens when one exits, and the removal of dead units' files.

// worker is one unit's agent, running, or a dead unit being removed, or
// a unit being ended.
type worker struct {
	principal bool
	// owner is the principal whose agent deployed this subordinate.
	owner  string
	cancel context.CancelFunc
	done   chan struct{}
	// dead is set once the agent has stopped on a dead unit, which is
	// being removed: the unit is not started again meanwhile, nor is the
	// machine idle.
	dead bool
	// going is set once the unit is to be ended (forced out): the ender
	// stops its agent, its processes and its files; nobody else touches
	// the worker meanwhile, and the machine is not idle.
	going bool
}

// removal is how a dead unit's removal ended.
type removal struct {
	unit    string
	removed bool
}

// maxRemovals bounds the dead units whose files a machine agent removes at
// once.
const maxRemovals = 4

// deadWait bounds how long the agent of a dead machine waits for its units
// to be ended and removed before it stops.
const deadWait = time.Minute

type exit struct {
	unit string
	err  error
}

// startWorker runs the named unit's agent, unless it runs already, with
// issued, a credential just issued to it, or (nil) one it asks for: a
// principal's, or (owner set) a subordinate's, deployed by owner's agent.
func (a *Agent) startWorker(ctx context.Context, unit, owner string, issued *pki.Credential, isNew bool) error {
	a.mu.Lock()
	if _, ok := a.workers[unit]; ok {
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	if issued == nil {
		creds, err := a.issueCredentials(ctx, []string{unit})
		if err != nil {
			return err
		}
		issued = &creds[0]
	}
	cred := newUnitCredential(unit, *issued)
	api, closer, err := a.cfg.DialUnit(cred)
	if err != nil {
		return err
	}
	api = batchedAPI{API: api, unit: unit, b: a.statuses, cred: cred}
	var principalDir string
	if owner != "" {
		principalDir = a.unitDir(owner)
	}
	a.gate.see(unit)
	hookTimeout, updateStatus := a.unitSettings(ctx)
	ua, err := unitagent.New(unitagent.Config{
		Unit: unit, MachineID: a.cfg.MachineID, Address: a.cfg.Address, DataDir: a.unitDir(unit), PrincipalDir: principalDir,
		ToolsDir: a.toolsDir, API: api, Watches: a.mux.ForRenewableAgent(cred, api), Logger: a.cfg.Logger, HookLock: a.hookLock,
		HookTimeout: hookTimeout, UpdateStatusInterval: updateStatus, HookMetrics: a.cfg.HookMetrics, Retry: a.cfg.UnitRetry, Deployer: deployer{a: a, principal: unit}, Charms: a.charms,
		Tools: a.tools, New: isNew, Beats: a.beats, Host: a.host, Gate: a.gate,
	})
	if err != nil {
		closer.Close()
		return err
	}
	wctx, wcancel := context.WithCancel(a.ctx)
	w := &worker{principal: owner == "", owner: owner, cancel: wcancel, done: make(chan struct{})}
	a.mu.Lock()
	if _, ok := a.workers[unit]; ok { // started meanwhile
		a.mu.Unlock()
		wcancel()
		closer.Close()
		return nil
	}
	a.workers[unit] = w
	a.mu.Unlock()
	a.logger.Info("unit agent started", "unit", unit, "new", isNew)
	go func() {
		defer close(w.done)
		defer closer.Close()
		// The unit's credential is issued again, should the controller
		// refuse it, while its agent runs.
		rctx, rcancel := context.WithCancel(wctx)
		renewing := make(chan struct{})
		go func() {
			defer close(renewing)
			a.renewUnitCredentials(rctx, cred)
		}()
		defer func() { rcancel(); <-renewing }()
		err := ua.Run(wctx)
		if wctx.Err() == nil {
			select {
			case a.exited <- exit{unit: unit, err: err}:
			case <-a.ctx.Done():
			}
		}
	}()
	return nil
}

// stopWorker stops the named unit's agent and waits for it; with clean, it
// removes the unit's files too.
func (a *Agent) stopWorker(unit string, clean bool) {
	a.mu.Lock()
	w := a.workers[unit]
	if w != nil && w.going {
		a.mu.Unlock()
		return // the ender stops it, and removes its files
	}
	delete(a.workers, unit)
	a.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
	if clean {
		// A recalled unit is ended as the ender ends one forced out (a
		// subordinate forced out is dead before the cleaner removes it,
		// and its principal may recall it first): the processes of its
		// session, then what its claims hold on the host (cleanHost, which
		// forgets it at the gate), before its directory, which holds the
		// record of the files they wrote and the session's mark. Not all
		// gone, the directory stays for a later try.
		if !a.stopSessions(a.ctx, []string{unit}) || !a.cleanHost(a.ctx, unit) {
			return
		}
		if err := removeTree(a.unitDir(unit), unitagent.DataFiles...); err != nil {
			a.logger.Warn("cannot remove unit files", "unit", unit, "error", err)
		}
	}
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	names := make([]string, 0, len(a.workers))
	for n := range a.workers {
		names = append(names, n)
	}
	a.mu.Unlock()
	for _, n := range names {
		a.stopWorker(n, false)
	}
}

// workerExited handles a unit agent that stopped on its own: a dead
// principal is removed (its machine agent's job, U5) with its files, by a
// goroutine of wg (removeDead), so that dead units are removed side by
// side and the agent goes on meanwhile; a dead subordinate waits for its
// principal's agent to recall it, unless it was forced out, which the
// ender ends at once; any other stop is restarted.
func (a *Agent) workerExited(ctx context.Context, e exit, wg *sync.WaitGroup) {
	a.mu.Lock()
	w := a.workers[e.unit]
	if w == nil || w.going {
		a.mu.Unlock()
		return // the ender's
	}
	delete(a.workers, e.unit)
	a.mu.Unlock()
	if !errors.Is(e.err, unitagent.ErrDead) {
		a.logger.Warn("unit agent stopped; restarting it", "unit", e.unit, "error", e.err)
		time.AfterFunc(time.Second, func() {
			if err := a.startWorker(ctx, e.unit, w.owner, nil, false); err != nil {
				a.logger.Warn("cannot restart unit agent", "unit", e.unit, "error", err)
			}
		})
		return
	}
	forced := errors.Is(e.err, unitagent.ErrForcedOut)
	a.mu.Lock()
	a.workers[e.unit] = &worker{principal: w.principal, owner: w.owner, cancel: func() {}, done: closedChan(), dead: true}
	a.mu.Unlock()
	if !w.principal {
		if forced {
			a.end(e.unit) // its principal's agent will not recall it
		}
		return // its principal's agent removes it (Recall)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := removal{unit: e.unit, removed: a.removeDead(ctx, e.unit, forced)}
		select {
		case a.removals <- r:
		case <-ctx.Done():
		}
	}()
}

// removeDead removes a dead principal unit, then its files, and reports
// whether it did. The removal goes with the others of the moment in one
// call (unitRemovals); the files of a few units are removed at once. A
// unit forced out has the processes of its session ended before its files
// go.
func (a *Agent) removeDead(ctx context.Context, unit string, forced bool) bool {
	own := func(ctx context.Context) error {
		_, err := a.cfg.API.RemoveUnit(ctx, &pb.RemoveUnitRequest{Unit: unit})
		return err
	}
	bo := backoff.NewExponentialBackOff(backoff.WithMaxElapsedTime(time.Minute))
	err := backoff.Retry(func() error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := a.unitRemovals.do(cctx, unit, own)
		if status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	}, backoff.WithContext(bo, ctx))
	if err != nil {
		a.logger.Warn("cannot remove dead unit", "unit", unit, "error", err)
		return false
	}
	a.logger.Info("dead unit removed", "unit", unit)
	// Its files go even when the agent is stopping: the unit is gone from
	// the model, and nothing else would remove them.
	a.removing <- struct{}{}
	defer func() { <-a.removing }()
	if forced && !a.stopSessions(ctx, []string{unit}) || !a.cleanHost(ctx, unit) {
		return true // its files stay, for a later start to end them
	}
	if err := removeTree(a.unitDir(unit), unitagent.DataFiles...); err != nil {
		a.logger.Warn("cannot remove unit files", "unit", unit, "error", err)
	}
	return true
}

// removalEnded records how a dead unit's removal ended: removed, it is
// not to be started again while the watch still shows it; not removed,
// its agent is started again by the next reconcile, finds it dead, and
// its removal is tried again.
func (a *Agent) removalEnded(r removal) {
	a.mu.Lock()
	delete(a.workers, r.unit)
	a.mu.Unlock()
	if r.removed {
		a.removed[r.unit] = true
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

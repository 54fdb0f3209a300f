package main

// The core's steps between its calls to the controller: adding units
// machine by machine, destroying machines as they free up, and waiting
// for the model to reach a phase's end (every unit settled, every unit
// gone, no entity key left), as the harness's watch and etcd show it.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// spread returns how many units go on each machine: n spread evenly.
func spread(n int, machines []string) map[string]int {
	out := map[string]int{}
	for i := 0; i < n; i++ {
		out[machines[i%len(machines)]]++
	}
	return out
}

// addUnits adds a service's units machine by machine, concurrency calls
// at once.
func addUnits(ctx context.Context, op pb.OperatorServiceClient, svc string, per map[string]int, concurrency int) error {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for m, n := range per {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: svc, NumUnits: int32(n), To: m}); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("add %d units of %s to machine %s: %w", n, svc, m, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// machinesACall is how many machines destroyMachinesWhenFree names in a
// call: as many as the controller destroys in one transaction.
const machinesACall = 16

// destroyMachinesWhenFree destroys each of the machines ids as soon as the
// watch sees no alive unit on it, those free at once together, as an
// operator's `ctl destroy-machine` of them all would (DestroyMachines,
// machinesACall machines a call at most, which the controller writes in
// one transaction; 16 calls at once), and returns once all are destroyed. A
// machine the controller still finds an alive unit on (the watch runs
// behind) is tried again later.
func destroyMachinesWhenFree(ctx context.Context, op pb.OperatorServiceClient, f *follower, ids []string) error {
	left := make(map[string]bool, len(ids))
	for _, id := range ids {
		left[id] = true
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for {
		mu.Lock()
		free := f.free(left)
		for _, id := range free {
			delete(left, id)
		}
		pending, failed := len(left), len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
		for todo := free; len(todo) > 0; {
			call := todo[:min(len(todo), machinesACall)]
			todo = todo[len(call):]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				resp, err := op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{Machines: call})
				mu.Lock()
				defer mu.Unlock()
				if err == nil && len(resp.GetResults()) != len(call) {
					err = fmt.Errorf("DestroyMachines answered %d machines of %d", len(resp.GetResults()), len(call))
				}
				if err != nil {
					errs = append(errs, err)
					return
				}
				for i, id := range call {
					switch r := resp.GetResults()[i]; codes.Code(r.GetCode()) {
					case codes.OK:
					case codes.FailedPrecondition:
						left[id] = true
					default:
						errs = append(errs, fmt.Errorf("destroy machine %s: %s", id, r.GetMessage()))
					}
				}
			}()
		}
		if pending == 0 && len(free) == 0 {
			wg.Wait()
			mu.Lock()
			pending = len(left)
			mu.Unlock()
			if pending == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settleQuiet is how long no unit agent's status may change for the
// units to count as settled: the related unit goes idle between its
// relation hooks, and should not be taken for done.
const settleQuiet = time.Second

// waitSettled waits until total units run and are idle, with no unit
// agent's status changing for settleQuiet, and returns when that state
// began (the last change) and how long after start each unit was first
// running, both by the times the controller stamped on the statuses.
//
// onTail is called once, when idleTail units are idle but not all (only
// the related units are busy).
func waitSettled(ctx context.Context, f *follower, total, idleTail int, start time.Time, fl *fleet, onTail func()) (time.Time, []float64, error) {
	p := newProgress(start)
	tailSeen := false
	var fleetErr error
	var units, running, idle int
	err := f.wait(ctx, 100*time.Millisecond, func() bool {
		if fleetErr = fl.err(); fleetErr != nil {
			return true
		}
		units, running, idle = f.agentCounts()
		if !tailSeen && units == total && idle >= idleTail && idle < total {
			tailSeen = true
			onTail()
		}
		if p.due() {
			p.say("%d units, %d running, %d idle", units, running, idle)
		}
		f.mu.Lock()
		quiet := time.Since(f.lastAgentChange) >= settleQuiet
		f.mu.Unlock()
		return units == total && idle == total && quiet
	})
	if fleetErr != nil {
		return time.Time{}, nil, fleetErr
	}
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("waiting for units to run: %w (%d of %d running, %d idle)", err, running, total, idle)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]float64, 0, len(f.firstRunning))
	for _, t := range f.firstRunning {
		out = append(out, t.Sub(start).Seconds())
	}
	return f.lastAgentStamp, out, nil
}

// waitUnits waits until no unit is left, saying how many are left (and
// how long since start) as it goes, and returns the revision of the model
// at which the watch saw the last go.
func waitUnits(ctx context.Context, f *follower, etcd *clientv3.Client, start time.Time) (rev int64, err error) {
	p := newProgress(start)
	if err := f.wait(ctx, time.Second, func() bool {
		var inEtcd string
		if p.due() {
			// What etcd holds now, beside what the watch has seen.
			inEtcd = "?"
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if r, err := etcd.Get(rctx, namespace+unitsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
				inEtcd = strconv.FormatInt(r.Count, 10)
			}
			cancel()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if inEtcd != "" {
			p.say("%d units left as the watch sees them (%d dying or dead; %s in etcd), %d machines", len(f.units), f.notAlive(), inEtcd, len(f.machines))
		}
		rev = f.rev[unitsPrefix]
		return len(f.units) == 0
	}); err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		return 0, fmt.Errorf("waiting for units to go: %w (%d left)", err, len(f.units))
	}
	return rev, nil
}

// waitEmpty waits until etcd holds no entity keys, saying how many are
// left as it goes, and returns the first revision at which it held none.
// The follower does not watch every entity prefix: once it has seen the
// units and the machines go, the others are counted from etcd, at its
// current revision until none is left, then at each revision since the
// last that still held one, so that the revision is the one at which the
// last key went, as a watch of everything would have seen it.
func waitEmpty(ctx context.Context, f *follower, etcd *clientv3.Client, start time.Time) (rev int64, err error) {
	p := newProgress(start)
	var checked int64 // the latest revision known to hold an entity key
	var readErr error
	if err := f.wait(ctx, 20*time.Millisecond, func() bool {
		f.mu.Lock()
		machines := len(f.machines)
		seen := max(f.rev[unitsPrefix], f.rev[machinesPrefix])
		f.mu.Unlock()
		if machines > 0 {
			if p.due() {
				p.say("%d machines left", machines)
			}
			return false
		}
		if checked == 0 {
			checked = seen - 1
		}
		empty, left, cur, err := emptyAfter(ctx, etcd, namespace, checked)
		if err != nil {
			readErr = err
			return true
		}
		if left > 0 {
			checked = cur
			if p.due() {
				p.say("%d entity keys left", left)
			}
			return false
		}
		rev = empty
		return true
	}); err != nil {
		return 0, fmt.Errorf("waiting for the model to empty: %w", err)
	}
	if readErr != nil {
		return 0, fmt.Errorf("waiting for the model to empty: %w", readErr)
	}
	return rev, nil
}

// emptyAfter counts the keys under the model's entity prefixes in
// namespace ns. When there are some, it returns how many (left) and the
// current revision (cur), the next call's after. When there are none, it
// returns the first revision after after at which there were none (empty),
// reading each revision since in turn.
func emptyAfter(ctx context.Context, etcd *clientv3.Client, ns string, after int64) (empty, left, cur int64, err error) {
	left, cur, err = entityKeysAt(ctx, etcd, ns, 0)
	if err != nil || left > 0 {
		return 0, left, cur, err
	}
	for r := after + 1; r < cur; r++ {
		n, _, err := entityKeysAt(ctx, etcd, ns, r)
		if err != nil {
			return 0, 0, cur, err
		}
		if n == 0 {
			return r, 0, cur, nil
		}
	}
	return cur, 0, cur, nil
}

// entityKeysAt counts the keys under the model's entity prefixes in
// namespace ns at revision rev (the current one when 0), and returns the
// revision read.
func entityKeysAt(ctx context.Context, etcd *clientv3.Client, ns string, rev int64) (n, at int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ops := make([]clientv3.Op, len(state.EntityPrefixes))
	for i, p := range state.EntityPrefixes {
		ops[i] = clientv3.OpGet(ns+p, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
	}
	resp, err := etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, 0, err
	}
	for _, r := range resp.Responses {
		n += r.GetResponseRange().Count
	}
	return n, resp.Header.Revision, nil
}

// progress says how a wait is going every progressEvery, with the seconds
// since it began, so that a run that stops making progress shows it.
type progress struct{ start, last time.Time }

const progressEvery = 5 * time.Second

// newProgress starts saying how a wait that began at start is going.
func newProgress(start time.Time) *progress { return &progress{start: start, last: time.Now()} }

// due reports whether it is time to say how the wait goes, and if so
// counts the time from now.
func (p *progress) due() bool {
	if time.Since(p.last) < progressEvery {
		return false
	}
	p.last = time.Now()
	return true
}

// say says how the wait goes, with the seconds since it began.
func (p *progress) say(format string, args ...any) {
	say("  "+format+" (%.0f s)", append(args, time.Since(p.start).Seconds())...)
}

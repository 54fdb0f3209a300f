package state_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// auditCalls is how many operators' calls TestAuditRandomized makes.
const auditCalls = 600

// auditedCall is one operator's call of TestAuditRandomized, as it went.
type auditedCall struct {
	id      int
	user    string
	rpc     string
	err     error
	refused bool
	seq     int64
	commits []int64
}

// TestAuditRandomized runs operators' calls from several users at once,
// each audited, beside agents' operations that are not, with the monitor
// checking the invariants (the audit log's among them) at every revision.
// Then every call that committed a change has exactly one entry, naming
// its user, written by the transaction of its first change; every refused
// call that changed nothing has exactly one entry, with its code; no other
// call has one; and the entries are numbered from 1 without gaps.
func TestAuditRandomized(t *testing.T) {
	seed := randomSeed(t)
	st, _ := newState(t)
	// Six hundred calls with the race detector on a loaded machine can take
	// longer than etcdtest's minute: the deadline is only a backstop.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mon := statetest.Start(t, st)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	users := []string{"admin", "alice", "bob", "carol"}
	for _, u := range users[1:] {
		addUser(t, ctx, st, u, admin, time.Now())
	}
	for _, name := range []string{"app", "kv"} {
		eps := appEndpoints
		if name == "kv" {
			eps = kvEndpoints
		}
		addService(t, ctx, st, name, eps)
	}

	var (
		mu      sync.Mutex
		calls   []*auditedCall
		next    atomic.Int64
		workers sync.WaitGroup
		agents  sync.WaitGroup
		stop    atomic.Bool
	)
	for w := range 2 {
		// Agents' operations, not audited, until the calls are done.
		agents.Add(1)
		go func() {
			defer agents.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
			var units []*pb.Unit
			for i := 0; !stop.Load(); i++ {
				if i%20 == 0 {
					var err error
					if units, err = st.AllUnits(ctx); err != nil {
						t.Errorf("AllUnits: %v", err)
						return
					}
				}
				if err := agentStep(ctx, st, rng, units); err != nil {
					t.Errorf("agent step: %v", err)
					return
				}
			}
		}()
	}
	for w := range 6 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			user := users[w%len(users)]
			for {
				id := int(next.Add(1))
				if id > auditCalls {
					return
				}
				c, err := operatorCall(ctx, st, rng, id, user)
				if err != nil {
					t.Errorf("call %d: %v", id, err)
					return
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
			}
		}()
	}
	workers.Wait()
	stop.Store(true)
	agents.Wait()
	mon.Stop(t)
	if t.Failed() {
		return
	}

	log, created := auditLog(t, ctx, st)
	byCall := map[int]*pb.AuditEntry{}
	for i, e := range log {
		if e.Seq != int64(i+1) {
			t.Fatalf("entry %d has seq %d: the log has a gap", i+1, e.Seq)
		}
		id, err := strconv.Atoi(strings.TrimPrefix(e.Summary, "call "))
		if err != nil {
			t.Fatalf("entry %d: summary %q names no call", e.Seq, e.Summary)
		}
		if byCall[id] != nil {
			t.Errorf("call %d has entries %d and %d", id, byCall[id].Seq, e.Seq)
		}
		byCall[id] = e
	}
	counts := map[string]int{}
	for _, c := range calls {
		e := byCall[c.id]
		switch {
		case len(c.commits) > 0:
			counts["changed"]++
			switch {
			case e == nil:
				t.Errorf("call %d (%s by %s) committed %d transactions and has no entry", c.id, c.rpc, c.user, len(c.commits))
			case e.Seq != c.seq || !e.Changed || e.Pending || e.User != c.user || e.Rpc != c.rpc:
				t.Errorf("call %d (%s by %s, seq %d): entry %v", c.id, c.rpc, c.user, c.seq, e)
			case created[e.Seq] != c.commits[0]:
				t.Errorf("call %d: entry %d created at revision %d, its first change at %d", c.id, e.Seq, created[e.Seq], c.commits[0])
			case (e.Code == 0) != (c.err == nil):
				t.Errorf("call %d ended with %v, its entry says code %d", c.id, c.err, e.Code)
			}
		case c.refused:
			counts["refused"]++
			if e == nil || e.Changed || e.Code == 0 || e.User != c.user {
				t.Errorf("refused call %d (%s by %s: %v) has entry %v, want one of its own with its code", c.id, c.rpc, c.user, c.err, e)
			}
		default:
			counts["unchanged"]++
			if e != nil {
				t.Errorf("call %d (%s by %s) changed nothing and was not refused (%v), but has entry %v", c.id, c.rpc, c.user, c.err, e)
			}
		}
	}
	if want := counts["changed"] + counts["refused"]; len(log) != want {
		t.Errorf("the log holds %d entries, want %d (one a call that changed something or was refused)", len(log), want)
	}
	t.Logf("seed %d; calls: %v; %d entries; %+v; conflicts by operation: %v", seed, counts, len(log), st.Stats(), st.ConflictsByOp())
	if counts["changed"] == 0 || counts["refused"] == 0 {
		t.Errorf("calls %v: want some that changed something and some refused", counts)
	}
}

// operatorCall makes one random operator's call, audited as user's.
func operatorCall(ctx context.Context, st *state.State, rng *rand.Rand, id int, user string) (*auditedCall, error) {
	machine := func() string { return strconv.Itoa(rng.IntN(40)) }
	unit := func() string { return fmt.Sprintf("%s/%d", []string{"app", "kv"}[rng.IntN(2)], rng.IntN(40)) }
	svc := func() string { return []string{"app", "kv", "db", "web"}[rng.IntN(4)] }
	var rpc string
	var do func(context.Context) error
	switch n := rng.IntN(100); {
	case n < 10:
		rpc = "AddMachines"
		do = func(ctx context.Context) error { _, err := st.AddMachines(ctx, 1+rng.IntN(40)); return err }
	case n < 25:
		rpc = "AddUnits"
		do = func(ctx context.Context) error {
			_, err := st.AddUnits(ctx, svc(), 1+rng.IntN(20), state.Placement{})
			return err
		}
	case n < 30:
		rpc = "Deploy"
		do = func(ctx context.Context) error {
			_, err := st.AddService(ctx, state.AddServiceArgs{Name: svc(), Charm: &pb.CharmRef{Name: "c", Revision: 1}, Endpoints: plainEndpoints})
			return err
		}
	case n < 38:
		rpc = "AddRelation"
		do = func(ctx context.Context) error {
			_, err := st.AddRelation(ctx, state.EndpointSpec{Service: svc()}, state.EndpointSpec{Service: svc()})
			return err
		}
	case n < 50:
		rpc = "DestroyMachines"
		do = func(ctx context.Context) error {
			ids := []string{machine(), machine()}
			for range rng.IntN(30) {
				ids = append(ids, machine())
			}
			var first error
			for i, err := range st.DestroyMachines(ctx, dedupe(ids), state.DestroyOptions{Force: rng.IntN(3) == 0}) {
				if err != nil && first == nil && i == 0 {
					first = err
				}
			}
			return first
		}
	case n < 65:
		rpc = "DestroyUnit"
		do = func(ctx context.Context) error { return st.DestroyUnit(ctx, unit(), state.DestroyOptions{}) }
	case n < 70:
		rpc = "DestroyService"
		do = func(ctx context.Context) error { return st.DestroyService(ctx, svc()) }
	case n < 80:
		rpc = "SetConfig"
		do = func(ctx context.Context) error {
			return st.UpdateServiceConfig(ctx, svc(), map[string]*pb.ConfigValue{"n": {Value: &pb.ConfigValue_IntValue{IntValue: int64(rng.IntN(3))}}}, nil)
		}
	case n < 85:
		rpc = "SetUserRole"
		do = func(ctx context.Context) error {
			_, err := st.SetUserRole(ctx, []string{"admin", "alice", "bob", "carol", "dan"}[rng.IntN(5)], pb.UserRole(1+rng.IntN(3)))
			return err
		}
	case n < 88:
		rpc = "AddUser"
		do = func(ctx context.Context) error {
			_, err := st.AddUser(ctx, state.NewUser{Name: fmt.Sprintf("u%d", rng.IntN(20)), Role: viewer, CreatedBy: user, SecretHash: "s", Expires: time.Now().Add(time.Hour)})
			return err
		}
	case n < 92:
		rpc = "RemoveUser"
		do = func(ctx context.Context) error { return st.RemoveUser(ctx, fmt.Sprintf("u%d", rng.IntN(20))) }
	case n < 95:
		// Written outside apply, in one transaction (commitAt).
		rpc = "Barrier"
		do = func(ctx context.Context) error { _, err := st.Barrier(ctx, 0); return err }
	case n < 97:
		// A record bound to a lease of its own; an id used twice exists.
		rpc = "AddController"
		do = func(ctx context.Context) error {
			return st.AddControllerJoin(ctx, fmt.Sprintf("%016x", rng.IntN(30)), &pb.ControllerJoin{SecretHash: "h", ExpiresUnixNano: time.Now().Add(time.Hour).UnixNano()})
		}
	default:
		rpc = "Register"
		do = func(ctx context.Context) error {
			_, err := st.Register(ctx, fmt.Sprintf("u%d", rng.IntN(20)), secretIs("s"), "h")
			return err
		}
	}
	a := state.NewAudit(&pb.AuditEntry{User: user, Rpc: rpc, Summary: fmt.Sprintf("call %d", id)})
	err := do(state.WithAudit(ctx, a))
	c := &auditedCall{id: id, user: user, rpc: rpc, err: err, seq: a.Seq(), commits: a.Commits()}
	var code uint32
	switch {
	case err == nil:
	case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrAlreadyExists),
		errors.Is(err, state.ErrInvalid), errors.Is(err, state.ErrFull), errors.Is(err, state.ErrUnauthenticated),
		errors.Is(err, state.ErrNoChange):
		code, c.refused = 9, true
	case errors.Is(err, state.ErrAborted):
		code = 10
	default:
		return nil, fmt.Errorf("%s: %w", rpc, err)
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if ferr := st.FinishAudit(ctx, a, code, msg, c.refused); ferr != nil {
		return nil, fmt.Errorf("FinishAudit of %s: %w", rpc, ferr)
	}
	return c, nil
}

// agentStep is one random operation of an agent, not audited.
func agentStep(ctx context.Context, st *state.State, rng *rand.Rand, units []*pb.Unit) error {
	if len(units) == 0 {
		return nil
	}
	u := units[rng.IntN(len(units))]
	var err error
	switch rng.IntN(3) {
	case 0:
		err = st.EnsureUnitDead(ctx, u.Name)
	case 1:
		err = st.RemoveUnit(ctx, u.Name)
	default:
		err = st.SetStatus(ctx, state.StatusUnit, u.Name, &pb.Status{Status: "active"})
	}
	if err == nil || errors.Is(err, state.ErrRefused) || errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrAborted) {
		return nil
	}
	return err
}

func dedupe(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

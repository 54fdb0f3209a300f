package state

import (
	"context"
	"strings"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The reads the controller's operations API and its leader's worker make
// beside the operations' own (operations_reads.go).

// WhoMayApprove names who may approve op, as its refusals do: "alice or
// an admin".
func WhoMayApprove(op *pb.Operation) string { return whoMay(op) }

// MayApprove says whether user u is among op's approvers (A2), as the
// dashboard asks before it shows an Approve button: the approval's
// transaction checks it again.
func MayApprove(op *pb.Operation, u *pb.User) bool { return u != nil && mayApprove(op, u) }

// RecentOperations returns up to limit (100 when zero, at most 1,000)
// operations, newest first, below id before (all when 0), in state st
// and of service when they are set.
func (s *State) RecentOperations(ctx context.Context, st pb.OperationState, service string, before int64, limit int) ([]*pb.Operation, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	if service != "" {
		if err := checkServiceName(service); err != nil {
			return nil, err
		}
	}
	end := prefixEnd(operationsPrefix)
	if before > 0 {
		end = OperationKey(before)
	}
	var out []*pb.Operation
	for len(out) < limit {
		resp, err := s.readRange(ctx, getOp{Key: operationsPrefix, End: end, Limit: operationsPage, NewestFirst: true})
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			op, err := decode[pb.Operation](kv)
			if err != nil {
				return nil, err
			}
			if (st == 0 || op.v.State == st) && (service == "" || op.v.Service == service) && len(out) < limit {
				out = append(out, op.v)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
	return out, nil
}

// Heartbeats returns when each of the named machines last reported its
// tasks (absent: never, or not since its record was deleted).
func (s *State) Heartbeats(ctx context.Context, machines []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for len(machines) > 0 {
		batch := machines[:min(len(machines), MaxTxnOps)]
		machines = machines[len(batch):]
		gets := make([]getOp, 0, len(batch))
		for _, m := range batch {
			if err := checkMachineID(m); err != nil {
				return nil, err
			}
			gets = append(gets, get(HeartbeatKey(m)))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		for i, m := range batch {
			hb, err := decode[pb.TaskHeartbeat](r.one(i))
			if err != nil {
				return nil, err
			}
			if hb != nil {
				out[m] = time.Unix(0, hb.v.UnixNano)
			}
		}
	}
	return out, nil
}

// TaskGauges counts the open tasks of every operation by state, from
// their references, and says when the task running longest on a machine
// (running, pausing or stopping) started; zero when none runs.
func (s *State) TaskGauges(ctx context.Context) (map[pb.TaskState]int64, time.Time, error) {
	counts := map[pb.TaskState]int64{}
	open, err := s.listAll(ctx, refOpOpen, false)
	if err != nil {
		return nil, time.Time{}, err
	}
	for _, kv := range open {
		counts[refValueState(string(kv.Value))]++
	}
	// The reference of a task on a machine is made when it starts (each
	// attempt): the one made first is the longest running.
	running, err := s.listAll(ctx, refMachineRunning, true)
	if err != nil || len(running) == 0 {
		return counts, time.Time{}, err
	}
	first := running[0]
	for _, kv := range running[1:] {
		if kv.CreateRevision < first.CreateRevision {
			first = kv
		}
	}
	// <machine>/<op>/<unit>, the unit's name holding a "/" itself.
	parts := strings.SplitN(strings.TrimPrefix(string(first.Key), refMachineRunning), "/", 3)
	if len(parts) != 3 {
		return nil, time.Time{}, invalidf("corrupt reference %s", first.Key)
	}
	id, err := parseOpID(parts[1])
	if err != nil {
		return nil, time.Time{}, invalidf("corrupt reference %s", first.Key)
	}
	t, err := s.Task(ctx, id, parts[2])
	if err != nil {
		return nil, time.Time{}, err
	}
	return counts, time.Unix(0, t.StartedUnixNano), nil
}

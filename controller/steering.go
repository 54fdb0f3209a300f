package controller

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Operators steer a service's rollout over the OperatorService: its
// policy, what it is doing, and the verbs that pause, resume, promote or
// abort it (docs/DESIGN.md, Revisions and rollouts). state keeps the
// records and refuses the verbs in states that do not allow them; the
// leader's rollout worker does the moving.

// The bounds of a rollout's status: at most maxStatusUnits units, and
// fewer once the answer reaches maxStatusBytes (each unit's note and
// message cut to maxStatusText bytes), so that it stays under gRPC's
// 4 MiB whatever the service.
const (
	maxStatusUnits = 5000
	maxStatusBytes = 3 << 20
	maxStatusText  = 256
)

// maxPolicyDuration bounds a policy's durations, so that a deadline
// added to now stays a time.
const maxPolicyDuration = 30 * 24 * time.Hour

// noGate is what names no gate in a policy change: it clears the gate.
const noGate = "none"

// SetRolloutPolicy changes the fields the request sets of a service's
// rollout policy, the others kept, and returns the policy stored. Gate
// "none" clears the gate; a gate name is not checked against the
// controller's gates (the rollout worker reports an unknown one).
func (s *Server) SetRolloutPolicy(ctx context.Context, req *pb.SetRolloutPolicyRequest) (*pb.SetRolloutPolicyResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		ms   *int64
	}{{"min-healthy", req.MinHealthyMs}, {"deadline", req.DeadlineMs}} {
		if d.ms != nil && *d.ms > maxPolicyDuration.Milliseconds() {
			return nil, invalid("%s %s: at most %s", d.name, time.Duration(*d.ms)*time.Millisecond, maxPolicyDuration)
		}
	}
	if req.MaxParallel == nil && req.Canary == nil && req.MinHealthyMs == nil && req.DeadlineMs == nil &&
		req.AutoRevert == nil && req.Gate == nil {
		return nil, invalid("no field of the rollout policy of %s given: set max-parallel, canary, min-healthy, deadline, auto-revert or gate", req.Service)
	}
	p, err := s.st.UpdateRolloutPolicy(ctx, req.Service, func(p *pb.RolloutPolicy) error {
		if req.MaxParallel != nil {
			p.MaxParallel = *req.MaxParallel
		}
		if req.Canary != nil {
			p.Canary = *req.Canary
		}
		if req.MinHealthyMs != nil {
			p.MinHealthyMs = *req.MinHealthyMs
		}
		if req.DeadlineMs != nil {
			p.DeadlineMs = *req.DeadlineMs
		}
		if req.AutoRevert != nil {
			p.AutoRevert = *req.AutoRevert
		}
		if req.Gate != nil {
			p.Gate = *req.Gate
			if p.Gate == noGate {
				p.Gate = ""
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.SetRolloutPolicyResponse{Policy: p}, nil
}

// GetRolloutPolicy returns a service's rollout policy: the defaults when
// none was set.
func (s *Server) GetRolloutPolicy(ctx context.Context, req *pb.GetRolloutPolicyRequest) (*pb.GetRolloutPolicyResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	p, err := s.st.RolloutPolicy(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	return &pb.GetRolloutPolicyResponse{Policy: p}, nil
}

// RolloutStatus returns a service's rollout: its state, its units
// counted and listed (bounded), and its gate's decisions, newest first;
// all read at one revision.
func (s *Server) RolloutStatus(ctx context.Context, req *pb.RolloutStatusRequest) (*pb.RolloutStatusResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	v, err := s.st.ReadRolloutView(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	return rolloutStatus(req.Service, v), nil
}

// rolloutStatus builds RolloutStatus's answer from what it read.
func rolloutStatus(service string, v *state.RolloutView) *pb.RolloutStatusResponse {
	ro := v.Rollout
	resp := &pb.RolloutStatusResponse{
		Service: service, Rollout: ro, Policy: v.Policy, Revision: v.Revision,
		PermitLimit: int64(state.MaxParallelUnits(v.Policy, len(v.Units))),
		Counts:      &pb.RolloutCounts{Units: int32(len(v.Units))},
	}
	for i := len(v.Decisions) - 1; i >= 0 && len(resp.Decisions) < state.MaxGateDecisions; i-- {
		resp.Decisions = append(resp.Decisions, v.Decisions[i])
	}
	size := proto.Size(resp)
	for _, u := range v.Units {
		ru := &pb.RolloutUnit{Name: u.Name, Machine: u.MachineId, Agent: "allocating", Workload: "unknown"}
		if ur := v.UnitRevisions[u.Name]; ur != nil {
			ru.Current, ru.Target, ru.Note = ur.Current, ur.Target, cut(ur.Note, maxStatusText)
		}
		_, ru.Permit = v.Permits[u.Name]
		agentErr := false
		if st := v.Agents[u.Name]; st != nil {
			ru.Agent = st.Status
			if st.Status == "error" {
				agentErr = true
				ru.Message = cut(st.Message, maxStatusText)
			}
		}
		if st := v.Workloads[u.Name]; st != nil {
			ru.Workload = st.Status
			if ru.Message == "" {
				ru.Message = cut(st.Message, maxStatusText)
			}
		}
		c := resp.Counts
		switch {
		case agentErr && (ru.Target == ro.Target || ru.Current == ro.Target):
			c.Failed++
		case ru.Current == ro.Target:
			c.Updated++
		case ru.Permit:
			c.Updating++
		case isDenial(ru.Note):
			c.Denied++
		default:
			c.Waiting++
		}
		if n := proto.Size(ru) + 4; len(resp.Units) < maxStatusUnits && size+n <= maxStatusBytes {
			resp.Units = append(resp.Units, ru)
			size += n
		} else {
			resp.UnitsLeftOut++
		}
	}
	return resp
}

// isDenial says whether a unit's note is a gate's denial
// (state.RecordGateDecision writes `gate "orly" denied: <reason>`).
func isDenial(note string) bool {
	return strings.HasPrefix(note, `gate "`) && strings.Contains(note, `" denied: `)
}

// cut cuts s to at most n bytes, on a character's boundary, marking the
// cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}

// PauseRollout pauses a service's rolling (or canary) rollout: no permit
// is granted until it is resumed; units holding one finish their move.
func (s *Server) PauseRollout(ctx context.Context, req *pb.PauseRolloutRequest) (*pb.PauseRolloutResponse, error) {
	ro, err := s.rolloutVerb(ctx, req.Service, s.st.PauseRollout)
	if err != nil {
		return nil, err
	}
	return &pb.PauseRolloutResponse{Rollout: ro}, nil
}

// ResumeRollout resumes a service's paused or failed rollout, with a new
// deadline.
func (s *Server) ResumeRollout(ctx context.Context, req *pb.ResumeRolloutRequest) (*pb.ResumeRolloutResponse, error) {
	ro, err := s.rolloutVerb(ctx, req.Service, s.st.ResumeRollout)
	if err != nil {
		return nil, err
	}
	return &pb.ResumeRolloutResponse{Rollout: ro}, nil
}

// PromoteRollout ends a service's canary: the rest of its units move.
func (s *Server) PromoteRollout(ctx context.Context, req *pb.PromoteRolloutRequest) (*pb.PromoteRolloutResponse, error) {
	ro, err := s.rolloutVerb(ctx, req.Service, s.st.PromoteRollout)
	if err != nil {
		return nil, err
	}
	return &pb.PromoteRolloutResponse{Rollout: ro}, nil
}

// rolloutVerb applies a verb of state to a service's rollout and returns
// the rollout as it is then.
func (s *Server) rolloutVerb(ctx context.Context, service string, verb func(context.Context, string) error) (*pb.Rollout, error) {
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	if err := verb(ctx, service); err != nil {
		return nil, err
	}
	return s.st.Rollout(ctx, service)
}

// AbortRollout returns a service from its rollout now: a new revision,
// by the caller, whose spec is the rollout's previous (charm and
// configuration together), rolled out without a canary. Refused when the
// rollout is done or has nothing before it.
func (s *Server) AbortRollout(ctx context.Context, req *pb.AbortRolloutRequest) (*pb.AbortRolloutResponse, error) {
	if err := checkServiceName(req.Service); err != nil {
		return nil, err
	}
	rev, err := s.st.RevertRollout(ctx, req.Service, userName(ctx), "abort")
	if err != nil {
		return nil, err
	}
	ro, err := s.st.Rollout(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	return &pb.AbortRolloutResponse{Revision: revisionBrief(rev, nil), Aborted: ro.Reverting, ReturnedTo: ro.Previous, Rollout: ro}, nil
}

// policyFields describes the fields a policy change sets, as the audit
// log records them: "max-parallel 25%, canary 1, gate none".
func policyFields(r *pb.SetRolloutPolicyRequest) string {
	var parts []string
	if r.MaxParallel != nil {
		parts = append(parts, "max-parallel "+cut(*r.MaxParallel, 32))
	}
	if r.Canary != nil {
		parts = append(parts, fmt.Sprintf("canary %d", *r.Canary))
	}
	if r.MinHealthyMs != nil {
		parts = append(parts, "min-healthy "+(time.Duration(*r.MinHealthyMs)*time.Millisecond).String())
	}
	if r.DeadlineMs != nil {
		parts = append(parts, "deadline "+(time.Duration(*r.DeadlineMs)*time.Millisecond).String())
	}
	if r.AutoRevert != nil {
		parts = append(parts, fmt.Sprintf("auto-revert %v", *r.AutoRevert))
	}
	if r.Gate != nil {
		parts = append(parts, "gate "+cut(*r.Gate, 64))
	}
	if len(parts) == 0 {
		return "no field"
	}
	return strings.Join(parts, ", ")
}

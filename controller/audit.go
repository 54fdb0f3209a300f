package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The audit of users' calls (docs/ARCHITECTURE.md, Users and the audit
// log). Every OperatorService call of a user is audited: a call that
// changes the model gets its entry in the transaction of its first change
// (state.WithAudit), its result filled in when it ends; a refused call
// (refused below) that changed nothing gets an entry of its own right
// after. A read that succeeds, or any call that fails for another reason
// (the controller stopping, etcd unavailable), changed nothing and gets
// none.

// refused says whether code is a refusal of the call: it is recorded even
// though it changed nothing.
func refused(code codes.Code) bool {
	switch code {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.ResourceExhausted, codes.OutOfRange, codes.Unauthenticated:
		return true
	}
	return false
}

// Recorded refusals are rate-limited per user, so that a user (or a
// script gone wrong) cannot fill the log with refusals: beyond the rate,
// they are counted and the count goes with the user's next recorded
// refusal (AuditEntry.unrecorded).
const (
	refusalRate  = 10 // a second
	refusalBurst = 100
)

// refusalLimits are the users' refusal budgets, at most one a user
// (state.MaxUsers), and one for registrations, whose callers have no
// credential.
type refusalLimits struct {
	mu     sync.Mutex
	byUser map[string]*refusalLimit
}

type refusalLimit struct {
	lim     *rate.Limiter
	skipped int64
}

// take reports whether user's refusal is recorded and, if so, how many
// before it were not.
func (r *refusalLimits) take(user string) (record bool, skipped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byUser == nil {
		r.byUser = map[string]*refusalLimit{}
	}
	l := r.byUser[user]
	if l == nil {
		if len(r.byUser) > state.MaxUsers {
			// Users come and go; their budgets start again.
			clear(r.byUser)
		}
		l = &refusalLimit{lim: rate.NewLimiter(refusalRate, refusalBurst)}
		r.byUser[user] = l
	}
	if !l.lim.Allow() {
		l.skipped++
		return false, 0
	}
	skipped, l.skipped = l.skipped, 0
	return true, skipped
}

// auditFinishTimeout bounds the recording of a call's result, which goes
// on after the caller has gone.
const auditFinishTimeout = 10 * time.Second

// startAudit returns the audit of c's call of method with req (nil for a
// stream, whose handler adds its targets).
func (s *Server) startAudit(ctx context.Context, c caller, method string, req any) (context.Context, *state.Audit) {
	targets, summary := describe(req)
	return ctx, state.NewAudit(&pb.AuditEntry{User: c.id, Rpc: method, Targets: targets, Summary: summary, Controller: s.cfg.ID})
}

// finishAudit records how c's audited call ended.
func (s *Server) finishAudit(ctx context.Context, c caller, a *state.Audit, err error) {
	code := status.Code(err)
	record := refused(code)
	if record && a.Seq() == 0 {
		var skipped int64
		if record, skipped = s.refusals.take(c.id); record {
			a.SetUnrecorded(skipped)
		}
	}
	if a.Seq() == 0 && !record {
		return
	}
	msg := ""
	if err != nil {
		msg = status.Convert(err).Message()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditFinishTimeout)
	defer cancel()
	if ferr := s.st.FinishAudit(ctx, a, uint32(code), msg, record); ferr != nil {
		s.logger.Warn("cannot record a call in the audit log", "user", c.id, "seq", a.Seq(), "error", ferr)
	}
}

// describe returns the entities a request names, as kind:id, and a
// summary of its arguments: never a secret, a credential's hash, a
// charm's bytes or a configuration's values (which may be secrets), only
// their keys.
func describe(req any) (targets []string, summary string) {
	svc := func(n string) string { return "service:" + n }
	unit := func(n string) string { return "unit:" + n }
	machine := func(n string) string { return "machine:" + n }
	user := func(n string) string { return "user:" + n }
	endpointServices := func(eps []string) []string {
		var out []string
		for _, ep := range eps {
			name, _, _ := strings.Cut(ep, ":")
			if t := svc(name); !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
		return out
	}
	force := func(f bool, wait *int64) string {
		switch {
		case !f:
			return ""
		case wait != nil:
			return fmt.Sprintf(" --force --max-wait %s", time.Duration(*wait)*time.Millisecond)
		}
		return " --force"
	}
	switch r := req.(type) {
	case *pb.DeployRequest:
		name := r.Service
		if name == "" {
			name = r.Charm
		}
		summary = fmt.Sprintf("deploy charm %s revision %d as %s, %d units", r.Charm, r.Revision, name, r.NumUnits)
		if r.To != "" {
			summary += " to machine " + r.To
		}
		if len(r.Config) > 0 {
			summary += ", config keys " + strings.Join(sortedKeys(r.Config), " ")
		}
		return []string{svc(name), "charm:" + r.Charm}, summary
	case *pb.AddUnitsRequest:
		summary = fmt.Sprintf("add %d units of %s", r.NumUnits, r.Service)
		if r.To != "" {
			summary += " to machine " + r.To
		}
		return []string{svc(r.Service)}, summary
	case *pb.AddMachinesRequest:
		return nil, fmt.Sprintf("add %d machines (manual %v)", r.NumMachines, r.Manual)
	case *pb.AddRelationRequest:
		return endpointServices(r.Endpoints), "relate " + strings.Join(r.Endpoints, " ")
	case *pb.DestroyRelationRequest:
		return endpointServices(r.Endpoints), "destroy the relation " + strings.Join(r.Endpoints, " ")
	case *pb.DestroyUnitRequest:
		return []string{unit(r.Unit)}, "destroy unit " + r.Unit + force(r.Force, r.MaxWaitMs)
	case *pb.DestroyMachineRequest:
		return []string{machine(r.Machine)}, "destroy machine " + r.Machine + force(r.Force, r.MaxWaitMs)
	case *pb.DestroyMachinesRequest:
		for _, m := range r.Machines {
			targets = append(targets, machine(m))
		}
		return targets, fmt.Sprintf("destroy %d machines%s", len(r.Machines), force(r.Force, r.MaxWaitMs))
	case *pb.DestroyServiceRequest:
		return []string{svc(r.Service)}, "destroy service " + r.Service
	case *pb.ResolvedRequest:
		summary = "resolved " + r.Unit
		if r.All {
			summary = "resolved --all"
		} else {
			targets = []string{unit(r.Unit)}
		}
		if r.NoRetry {
			summary += " --no-retry"
		}
		return targets, summary
	case *pb.GetConfigRequest:
		return []string{svc(r.Service)}, "get the config of " + r.Service
	case *pb.SetConfigRequest:
		summary = "set the config of " + r.Service
		if len(r.Set) > 0 {
			summary += ": keys " + strings.Join(sortedKeys(r.Set), " ")
		}
		if len(r.Unset) > 0 {
			summary += "; unset " + strings.Join(r.Unset, " ")
		}
		return []string{svc(r.Service)}, summary
	case *pb.ShowStatusLogRequest:
		return []string{unit(r.Unit)}, "show the status log of " + r.Unit
	case *pb.ShowUnitRequest:
		return []string{unit(r.Unit)}, "show unit " + r.Unit
	case *pb.ShowMachineRequest:
		return []string{machine(r.Machine)}, "show machine " + r.Machine
	case *pb.DebugLogRequest:
		return nil, debugLogSummary(r)
	case *pb.AddUserRequest:
		return []string{user(r.Name)}, fmt.Sprintf("add user %s (%s), registration for %s", r.Name, roleName(r.Role), time.Duration(r.ExpiresMs)*time.Millisecond)
	case *pb.RemoveUserRequest:
		return []string{user(r.Name)}, "remove user " + r.Name
	case *pb.SetUserRoleRequest:
		return []string{user(r.Name)}, fmt.Sprintf("make user %s %s", r.Name, roleName(r.Role))
	case *pb.AddControllerRequest:
		return nil, fmt.Sprintf("issue a controller join token for %s", time.Duration(r.ValidForMs)*time.Millisecond)
	case *pb.IssueJoinTokenRequest:
		return []string{machine(r.Machine)}, fmt.Sprintf("issue a join token for machine %s for %s", r.Machine, time.Duration(r.TtlMs)*time.Millisecond)
	case *pb.BarrierRequest:
		return nil, fmt.Sprintf("write a barrier at or past revision %d", r.AtLeast)
	case *pb.VersionRequest:
		return nil, "ask the controller's version"
	case *pb.RotateCredentialRequest:
		return nil, "replace the caller's credential"
	case *pb.RegisterRequest:
		return []string{user(r.User)}, "register user " + r.User
	// Operations: the operation (RunAction's is added once made), its
	// service and units; parameters by their keys only.
	case *pb.ListActionsRequest:
		return []string{svc(r.Service)}, "list the actions of " + r.Service
	case *pb.RunActionRequest:
		return operationTargets(r.Targets), fmt.Sprintf("run %s on %s%s%s", r.Action, listSome(r.Targets, 8),
			paramKeys(r.ParamsJson), maxParallel(r.MaxParallel))
	case *pb.ListOperationsRequest:
		return nil, "list operations"
	case *pb.ShowOperationRequest:
		return []string{opTarget(r.Id)}, fmt.Sprintf("show operation %d", r.Id)
	case *pb.ShowTaskRequest:
		return []string{opTarget(r.Id), unit(r.Unit)}, fmt.Sprintf("show operation %d's task on %s", r.Id, r.Unit)
	case *pb.ApproveOperationRequest:
		return []string{opTarget(r.Id)}, fmt.Sprintf("approve operation %d, digest %s", r.Id, r.Digest)
	case *pb.RejectOperationRequest:
		return []string{opTarget(r.Id)}, fmt.Sprintf("reject operation %d: %s", r.Id, r.Reason)
	case *pb.ExecuteOperationRequest:
		return []string{opTarget(r.Id)}, fmt.Sprintf("execute operation %d", r.Id)
	case *pb.PauseTasksRequest:
		return taskVerbTargets(r.Id, r.Units), taskVerbSummary("pause", r.Id, r.Units)
	case *pb.ResumeTasksRequest:
		return taskVerbTargets(r.Id, r.Units), taskVerbSummary("resume", r.Id, r.Units)
	case *pb.StopTasksRequest:
		return taskVerbTargets(r.Id, r.Units), taskVerbSummary("stop", r.Id, r.Units)
	// Revisions: by number; a rollback's configuration is the revision's,
	// never written here.
	case *pb.ListRevisionsRequest:
		return []string{svc(r.Service)}, "list the revisions of " + r.Service
	case *pb.ShowRevisionRequest:
		return []string{svc(r.Service)}, fmt.Sprintf("show revision %d of %s", r.Number, r.Service)
	case *pb.RollbackServiceRequest:
		if r.To == 0 {
			return []string{svc(r.Service)}, "roll back " + r.Service + " to the revision before its newest"
		}
		return []string{svc(r.Service)}, fmt.Sprintf("roll back %s to revision %d", r.Service, r.To)
	case *pb.RefreshServiceRequest:
		summary = fmt.Sprintf("refresh %s to charm %s-%d", r.Service, r.Charm, r.Revision)
		if len(r.Config) > 0 {
			summary += ": keys " + strings.Join(sortedKeys(r.Config), " ")
		}
		return []string{svc(r.Service), "charm:" + r.Charm}, summary
	// Rollouts: a policy change by the fields it sets.
	case *pb.SetRolloutPolicyRequest:
		return []string{svc(r.Service)}, "set the rollout policy of " + r.Service + ": " + policyFields(r)
	case *pb.GetRolloutPolicyRequest:
		return []string{svc(r.Service)}, "show the rollout policy of " + r.Service
	case *pb.RolloutStatusRequest:
		return []string{svc(r.Service)}, "show the rollout of " + r.Service
	case *pb.PauseRolloutRequest:
		return []string{svc(r.Service)}, "pause the rollout of " + r.Service
	case *pb.ResumeRolloutRequest:
		return []string{svc(r.Service)}, "resume the rollout of " + r.Service
	case *pb.PromoteRolloutRequest:
		return []string{svc(r.Service)}, "promote the rollout of " + r.Service
	case *pb.AbortRolloutRequest:
		return []string{svc(r.Service)}, "abort the rollout of " + r.Service
	case *pb.DashboardLoginRequest:
		return nil, "make a dashboard login link"
	// Manifests: a claim by the entities it names.
	case *pb.ClaimOwnershipRequest:
		var targets []string
		for _, e := range r.Entities {
			if len(targets) == 20 {
				break
			}
			targets = append(targets, e.Kind+":"+e.Id)
		}
		return targets, fmt.Sprintf("claim %d entities for manifest %s", len(r.Entities), r.Manifest)
	}
	return nil, ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// revocable returns ctx ending, and revoked reporting true, once user c's
// credential is no longer the one its call proved: the user was removed,
// or its credential replaced. A goroutine follows the credential's key
// through the watch hub until ctx ends; revoked waits for it.
func (s *Server) revocable(ctx context.Context, c caller) (_ context.Context, revoked func() bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	key := state.CredentialsPrefix + names.UserTag(c.id)
	go func() {
		defer close(done)
		w, err := s.cfg.Watches.WatchKey(ctx, key, 0)
		if err != nil {
			return
		}
		defer w.Close()
		for {
			b, err := w.Next(ctx)
			if errors.Is(err, watchhub.ErrClosed) || ctx.Err() != nil {
				return
			}
			if err != nil {
				// Its listing failed: it lists again when asked.
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
			if b.Reset && len(b.Events) == 1 && string(b.Events[0].Value) == c.hash {
				continue
			}
			if len(b.Events) > 0 || b.Reset {
				cancel(errRevoked)
				return
			}
		}
	}()
	return ctx, func() bool {
		cancel(nil)
		<-done
		return errors.Is(context.Cause(ctx), errRevoked)
	}
}

var errRevoked = errors.New("credential revoked")

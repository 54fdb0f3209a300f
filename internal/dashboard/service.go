package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// servicePrefixes are the keys a service page shows, besides the
// model's: its configuration, revisions, rollout's permits, policy and
// gate decisions, and its operations.
var servicePrefixes = append(append([]string{}, modelPrefixes...),
	"config/", "revisions/", "permits/", "rollout-policies/", "gate-decisions/", "operations/")

// serviceOpsShown is how many of a service's newest operations its page
// lists.
const serviceOpsShown = 20

// serviceView is what a service page shows.
type serviceView struct {
	User, Role, CSRF string
	// CanRun and CanResolve say which buttons show: the same table
	// authorizes the calls when made.
	CanRun, CanResolve bool
	Service            *pb.ServiceStatus
	Units              []unitRow
	Relations          []*pb.RelationStatus
	Rollout            *pb.RolloutStatusResponse
	// RolloutActive says a rollout is under way: rolling, in its canary
	// or paused.
	RolloutActive bool
	// Steer is the rollout's buttons, nil when none shows.
	Steer      *rolloutSteer
	Progress   progress
	Deadline   string
	Decisions  []decisionRow
	Config     []configRow
	Revisions  []*pb.RevisionBrief
	Head       int64
	Actions    []*pb.ActionInfo
	Operations []*pb.OperationBrief
}

// progress is a bar's done and total, and the percentage done.
type progress struct {
	Done, Total int64
	Percent     int
}

func newProgress(done, total int64) progress {
	p := progress{Done: done, Total: total}
	if total > 0 {
		p.Percent = int(done * 100 / total)
	}
	return p
}

// rolloutSteer says which of a rollout's buttons show: those the role
// may call (controller.Allows) and the rollout's state allows
// (state.PauseRollout and its kin).
type rolloutSteer struct {
	Pause, Resume, Promote, Abort bool
}

func steerOf(r *pb.Rollout, role pb.UserRole) *rolloutSteer {
	var st rolloutSteer
	switch r.GetState() {
	case pb.RolloutState_ROLLOUT_STATE_ROLLING:
		st.Pause, st.Abort = true, true
	case pb.RolloutState_ROLLOUT_STATE_CANARY:
		st.Pause, st.Promote, st.Abort = true, true, true
	case pb.RolloutState_ROLLOUT_STATE_PAUSED, pb.RolloutState_ROLLOUT_STATE_FAILED:
		st.Resume, st.Abort = true, true
	}
	st.Pause = st.Pause && controller.Allows("PauseRollout", role)
	st.Resume = st.Resume && controller.Allows("ResumeRollout", role)
	st.Promote = st.Promote && controller.Allows("PromoteRollout", role)
	st.Abort = st.Abort && controller.Allows("AbortRollout", role)
	if st == (rolloutSteer{}) {
		return nil
	}
	return &st
}

type decisionRow struct {
	When, Unit, Gate, Verdict, Reason string
	From, To                          int64
	RetryAfter                        string
}

type configRow struct {
	Name, Value, Type, Default, Description string
	Set                                     bool
}

// serviceView reads service as se's user: the same calls ctl status,
// rollout-status, config, revisions, actions and operations make.
func (s *Server) serviceView(ctx context.Context, se session, service string) (*serviceView, error) {
	role, err := s.role(ctx, se.user)
	if err != nil {
		return nil, err
	}
	v := &serviceView{User: se.user, Role: roleName(role), CSRF: se.csrf(),
		CanRun: controller.Allows("RunAction", role), CanResolve: controller.Allows("Resolved", role)}
	sreq := &pb.StatusRequest{Services: []string{service}}
	st, err := call(ctx, s, se.user, "Status", sreq, s.cfg.API.Status)
	if err != nil {
		return nil, err
	}
	for _, svc := range st.GetStatus().GetServices() {
		if svc.Name == service {
			v.Service = svc
		}
	}
	if v.Service == nil {
		return nil, notFoundf("service %s does not exist", service)
	}
	v.Units = buildView(&pb.ModelStatus{Services: []*pb.ServiceStatus{v.Service}}, "").Units
	v.Relations = st.GetStatus().GetRelations()

	ro, err := call(ctx, s, se.user, "RolloutStatus", &pb.RolloutStatusRequest{Service: service}, s.cfg.API.RolloutStatus)
	if err != nil {
		return nil, err
	}
	v.Rollout = ro
	if r := ro.GetRollout(); r != nil {
		switch r.State {
		case pb.RolloutState_ROLLOUT_STATE_ROLLING, pb.RolloutState_ROLLOUT_STATE_CANARY, pb.RolloutState_ROLLOUT_STATE_PAUSED:
			v.RolloutActive = true
		}
		v.Deadline = stamp(r.DeadlineUnixNano)
		v.Steer = steerOf(r, role)
	}
	v.Progress = newProgress(int64(ro.GetCounts().GetUpdated()), int64(ro.GetCounts().GetUnits()))
	for i := len(ro.GetDecisions()) - 1; i >= 0; i-- { // newest first
		d := ro.GetDecisions()[i]
		row := decisionRow{When: stamp(d.AtUnixNano), Unit: d.Unit, Gate: d.Gate, From: d.From, To: d.To,
			Verdict: strings.ToLower(strings.TrimPrefix(d.Decision.String(), "GATE_VERDICT_")), Reason: d.Reason}
		if d.RetryAfterMs > 0 {
			row.RetryAfter = fmt.Sprintf("%d ms", d.RetryAfterMs)
		}
		v.Decisions = append(v.Decisions, row)
	}

	cfg, err := call(ctx, s, se.user, "GetConfig", &pb.GetConfigRequest{Service: service}, s.cfg.API.GetConfig)
	if err != nil {
		return nil, err
	}
	for _, o := range cfg.GetOptions() {
		val, set := cfg.GetValues()[o.Name]
		row := configRow{Name: o.Name, Type: o.Type, Description: o.Description, Set: set && val.GetValue() != nil}
		if row.Set {
			row.Value = charm.FormatValue(val)
		}
		if o.Default.GetValue() != nil {
			row.Default = charm.FormatValue(o.Default)
		}
		v.Config = append(v.Config, row)
	}
	sort.Slice(v.Config, func(i, j int) bool { return v.Config[i].Name < v.Config[j].Name })

	revs, err := call(ctx, s, se.user, "ListRevisions", &pb.ListRevisionsRequest{Service: service}, s.cfg.API.ListRevisions)
	if err != nil {
		return nil, err
	}
	v.Head = revs.GetHead()
	for i := len(revs.GetRevisions()) - 1; i >= 0; i-- { // newest first
		v.Revisions = append(v.Revisions, revs.GetRevisions()[i])
	}

	acts, err := call(ctx, s, se.user, "ListActions", &pb.ListActionsRequest{Service: service}, s.cfg.API.ListActions)
	if err != nil {
		return nil, err
	}
	v.Actions = acts.GetActions()

	ops, err := call(ctx, s, se.user, "ListOperations", &pb.ListOperationsRequest{Service: service, Limit: serviceOpsShown}, s.cfg.API.ListOperations)
	if err != nil {
		return nil, err
	}
	v.Operations = ops.GetOperations()
	return v, nil
}

func (s *Server) servicePage(w http.ResponseWriter, r *http.Request, se session) {
	v, err := s.serviceView(r.Context(), se, r.PathValue("name"))
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "service.html", v)
}

// runAction starts an action on a service's units (all of them, or the
// form's units), as ctl run does: authorized and audited as the user's
// RunAction call.
func (s *Server) runAction(w http.ResponseWriter, r *http.Request, se session) {
	service := r.PathValue("name")
	targets := strings.Fields(r.PostFormValue("units"))
	if len(targets) == 0 {
		targets = []string{service}
	}
	params := strings.TrimSpace(r.PostFormValue("params"))
	if params == "" {
		params = "{}"
	}
	req := &pb.RunActionRequest{Targets: targets, Action: r.PostFormValue("action"), ParamsJson: []byte(params)}
	resp, err := call(r.Context(), s, se.user, "RunAction", req, s.cfg.API.RunAction)
	if err != nil {
		httpError(w, err)
		return
	}
	op := resp.GetOperation()
	msg := fmt.Sprintf("operation %d: %s on %d units, %s", op.Id, op.Action, len(op.Units), state.OperationStateName(op.State))
	if resp.WhoMayApprove != "" && op.State == pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL {
		msg += ": " + resp.WhoMayApprove + " may approve it"
	}
	answer(w, r, msg, fmt.Sprintf("/operations/%d", op.Id))
}

// steerRollout pauses, resumes, promotes or aborts a service's rollout,
// as ctl rollout does.
func (s *Server) steerRollout(w http.ResponseWriter, r *http.Request, se session) {
	service := r.PathValue("name")
	var err error
	switch verb := r.PathValue("verb"); verb {
	case "pause":
		_, err = call(r.Context(), s, se.user, "PauseRollout", &pb.PauseRolloutRequest{Service: service}, s.cfg.API.PauseRollout)
	case "resume":
		_, err = call(r.Context(), s, se.user, "ResumeRollout", &pb.ResumeRolloutRequest{Service: service}, s.cfg.API.ResumeRollout)
	case "promote":
		_, err = call(r.Context(), s, se.user, "PromoteRollout", &pb.PromoteRolloutRequest{Service: service}, s.cfg.API.PromoteRollout)
	case "abort":
		_, err = call(r.Context(), s, se.user, "AbortRollout", &pb.AbortRolloutRequest{Service: service}, s.cfg.API.AbortRollout)
	default:
		http.Error(w, "no such rollout verb "+verb+": want pause, resume, promote or abort", http.StatusNotFound)
		return
	}
	if err != nil {
		httpError(w, err)
		return
	}
	answer(w, r, fmt.Sprintf("%s's rollout: %s done", service, r.PathValue("verb")), "")
}

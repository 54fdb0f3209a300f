package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// operationPrefixes are the keys the operations pages show: operations,
// their tasks, checkpoints and logs, and the machines' heartbeats.
var operationPrefixes = []string{"operations/", "tasks/", "checkpoints/", "task-logs/", "heartbeats/"}

// The bounds of an operation's page: the tasks it lists (the rest are
// counted), the tasks whose log tails it shows and the bytes of each, and
// the operations the list page shows.
const (
	opTasksShown   = 200
	opLogsShown    = 8
	opLogTailBytes = 2048
	opsListed      = 100
)

// opsView is what the operations list shows.
type opsView struct {
	User, Role, CSRF string
	State            string
	Operations       []opRow
	Next             int64
}

type opRow struct {
	*pb.OperationBrief
	State, Created, Finished string
}

// opView is what an operation's page shows.
type opView struct {
	User, Role, CSRF string
	Op               *pb.Operation
	State            string
	Params           string
	WhoMayApprove    string
	// InProgress is the operation's "in progress" condition, when it is
	// in one: why, and until when.
	InProgress *condition
	Created    string
	Approved   string
	Executed   string
	Finished   string
	Counts     []kvn
	Progress   progress
	Tasks      []taskRow
	TasksLeft  int64
	Logs       []logTail
	// The buttons shown: the role's table (controller.Allows) and the
	// operation's own rules (its approvers, its requester) allow them.
	CanApprove, CanReject, CanExecute, CanSteer bool
}

// condition is an "in progress": its reason and deadline.
type condition struct {
	Reason, Deadline string
}

type kvn struct {
	Key string
	N   int64
}

type taskRow struct {
	Unit, Machine, State, Message, Heartbeat, Started, Finished, Checkpoint string
	Attempt, Resumed                                                        int64
	Results                                                                 []kv
	InProgress                                                              *condition
	CanPause, CanResume, CanStop                                            bool
}

type logTail struct {
	Unit    string
	Dropped int64
	Text    string
}

func (s *Server) opsView(ctx context.Context, se session, st string, before int64) (*opsView, error) {
	role, err := s.role(ctx, se.user)
	if err != nil {
		return nil, err
	}
	req := &pb.ListOperationsRequest{Limit: opsListed, Before: before}
	if st != "" {
		v, ok := pb.OperationState_value["OPERATION_STATE_"+strings.ToUpper(strings.ReplaceAll(st, "-", "_"))]
		if !ok || v == 0 {
			return nil, invalidf("no operation state %q", st)
		}
		req.State = pb.OperationState(v)
	}
	resp, err := call(ctx, s, se.user, "ListOperations", req, s.cfg.API.ListOperations)
	if err != nil {
		return nil, err
	}
	v := &opsView{User: se.user, Role: roleName(role), CSRF: se.csrf(), State: st, Next: resp.GetNext()}
	for _, o := range resp.GetOperations() {
		v.Operations = append(v.Operations, opRow{OperationBrief: o, State: state.OperationStateName(o.State),
			Created: stamp(o.CreatedUnixNano), Finished: stamp(o.FinishedUnixNano)})
	}
	return v, nil
}

func (s *Server) opsPage(w http.ResponseWriter, r *http.Request, se session) {
	before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	v, err := s.opsView(r.Context(), se, r.URL.Query().Get("state"), before)
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "operations.html", v)
}

// opView reads operation id as se's user: ShowOperation, and TaskLogs for
// the tails of the tasks shown first.
func (s *Server) opView(ctx context.Context, se session, id int64) (*opView, error) {
	who, err := call(ctx, s, se.user, "WhoAmI", &pb.WhoAmIRequest{}, s.cfg.API.WhoAmI)
	if err != nil {
		return nil, err
	}
	user := who.GetUser()
	role := user.GetRole()
	resp, err := call(ctx, s, se.user, "ShowOperation", &pb.ShowOperationRequest{Id: id, Limit: opTasksShown}, s.cfg.API.ShowOperation)
	if err != nil {
		return nil, err
	}
	op := resp.GetOperation()
	now := time.Now()
	v := &opView{User: se.user, Role: roleName(role), CSRF: se.csrf(), Op: op, State: state.OperationStateName(op.State),
		Params: prettyJSON(op.ParamsJson), WhoMayApprove: resp.GetWhoMayApprove(),
		Created: stamp(op.CreatedUnixNano), Approved: stamp(op.ApprovedUnixNano), Executed: stamp(op.ExecutedUnixNano), Finished: stamp(op.FinishedUnixNano)}
	var total int64
	for k, n := range resp.GetTaskCounts() {
		v.Counts = append(v.Counts, kvn{k, n})
		total += n
	}
	sort.Slice(v.Counts, func(i, j int) bool { return v.Counts[i].Key < v.Counts[j].Key })
	v.Progress = newProgress(resp.GetTaskCounts()["done"], total)
	v.TasksLeft = total - int64(len(resp.GetTasks()))

	// The operation's own rules decide the buttons beside the role's: an
	// approver among its approvers who did not request it; the
	// requester or an admin executes.
	awaiting := op.State == pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL && (op.ExpiresUnixNano == 0 || now.UnixNano() < op.ExpiresUnixNano)
	v.CanApprove = awaiting && controller.Allows("ApproveOperation", role) && op.Requester != user.GetName() && state.MayApprove(op, user)
	v.CanReject = awaiting && controller.Allows("RejectOperation", role) && (role == pb.UserRole_USER_ROLE_ADMIN || state.MayApprove(op, user))
	v.CanExecute = op.State == pb.OperationState_OPERATION_STATE_APPROVED && controller.Allows("ExecuteOperation", role) &&
		(op.Requester == user.GetName() || role == pb.UserRole_USER_ROLE_ADMIN)
	v.CanSteer = op.State == pb.OperationState_OPERATION_STATE_RUNNING && controller.Allows("PauseTasks", role)
	switch op.State {
	case pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL:
		v.InProgress = &condition{Reason: "awaiting approval by " + v.WhoMayApprove, Deadline: stamp(op.ExpiresUnixNano)}
	case pb.OperationState_OPERATION_STATE_APPROVED:
		v.InProgress = &condition{Reason: "approved by " + op.Approver + ", awaiting execution by " + op.Requester + " or an admin", Deadline: stamp(op.ExpiresUnixNano)}
	case pb.OperationState_OPERATION_STATE_RUNNING:
		v.InProgress = &condition{Reason: strings.TrimPrefix(progressText(resp.GetTaskCounts()), "0/0 done, ")}
		if op.TimeoutNs > 0 {
			v.InProgress.Deadline = "each task " + time.Duration(op.TimeoutNs).String() + " from its start"
		}
	}

	var started []string
	for _, info := range resp.GetTasks() {
		t := info.GetTask()
		row := taskRow{Unit: t.Unit, Machine: t.Machine, State: state.TaskStateName(t.State), Message: t.Message,
			Heartbeat: heartbeatAge(info), Started: stamp(t.StartedUnixNano), Finished: stamp(t.FinishedUnixNano),
			Attempt: t.Attempt, Resumed: t.Resumed, Results: sortedKV(t.Results), Checkpoint: strings.Join(info.GetCheckpointKeys(), ", ")}
		switch t.State {
		case pb.TaskState_TASK_STATE_RUNNING:
			row.InProgress = &condition{Reason: "running on machine " + t.Machine}
			if op.TimeoutNs > 0 && t.StartedUnixNano > 0 {
				row.InProgress.Deadline = stamp(t.StartedUnixNano + op.TimeoutNs)
			}
		case pb.TaskState_TASK_STATE_PAUSING, pb.TaskState_TASK_STATE_STOPPING:
			row.InProgress = &condition{Reason: row.State + ": the action is asked to checkpoint and end"}
			if op.PauseGraceNs > 0 && t.ChangedUnixNano > 0 {
				row.InProgress.Deadline = stamp(t.ChangedUnixNano + op.PauseGraceNs)
			}
		case pb.TaskState_TASK_STATE_PENDING:
			row.InProgress = &condition{Reason: "waiting for its machine to start it"}
		}
		if v.CanSteer {
			switch t.State {
			case pb.TaskState_TASK_STATE_PENDING, pb.TaskState_TASK_STATE_RUNNING:
				row.CanPause, row.CanStop = true, true
			case pb.TaskState_TASK_STATE_PAUSED, pb.TaskState_TASK_STATE_FAILED, pb.TaskState_TASK_STATE_LOST:
				row.CanResume, row.CanStop = true, t.State == pb.TaskState_TASK_STATE_PAUSED
			}
		}
		v.Tasks = append(v.Tasks, row)
		if t.Attempt > 0 {
			started = append(started, t.Unit)
		}
	}
	// The log tails of the running tasks first, then of the others
	// started.
	sort.SliceStable(started, func(i, j int) bool {
		return running(resp, started[i]) && !running(resp, started[j])
	})
	for _, u := range started[:min(len(started), opLogsShown)] {
		tail := logTail{Unit: u}
		var b bytes.Buffer
		err := collect(ctx, s, se.user, "TaskLogs", &pb.TaskLogsRequest{Operation: id, Unit: u, TailBytes: opLogTailBytes}, s.cfg.API.TaskLogs,
			func(m *pb.TaskLogsResponse) {
				tail.Dropped += m.Dropped
				b.Write(m.Data)
			})
		if err != nil {
			return nil, err
		}
		tail.Text = b.String()
		v.Logs = append(v.Logs, tail)
	}
	return v, nil
}

func running(resp *pb.ShowOperationResponse, unit string) bool {
	for _, t := range resp.GetTasks() {
		if t.GetTask().GetUnit() == unit {
			return t.GetTask().GetState() == pb.TaskState_TASK_STATE_RUNNING
		}
	}
	return false
}

// progressText says how an operation's tasks go: "3/10 done, 2
// running".
func progressText(counts map[string]int64) string {
	var total int64
	for _, n := range counts {
		total += n
	}
	parts := []string{fmt.Sprintf("%d/%d done", counts["done"], total)}
	for _, st := range []string{"running", "pending", "pausing", "paused", "stopping", "lost", "stopped", "failed"} {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// heartbeatAge is how a task's machine's last report reads: "3s ago",
// "never"; "" for a task not on a machine.
func heartbeatAge(t *pb.TaskInfo) string {
	switch st := t.GetTask().GetState(); {
	case t.GetHeartbeatAgeMs() < 0:
		return "never"
	case t.GetHeartbeatAgeMs() == 0 && st != pb.TaskState_TASK_STATE_RUNNING && st != pb.TaskState_TASK_STATE_PAUSING && st != pb.TaskState_TASK_STATE_STOPPING:
		return ""
	}
	return (time.Duration(t.GetHeartbeatAgeMs()) * time.Millisecond).Round(time.Second).String() + " ago"
}

// prettyJSON indents an operation's parameters, exactly as they were
// given otherwise.
func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

func opID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, invalidf("operation %q: want a number", r.PathValue("id"))
	}
	return id, nil
}

func (s *Server) opPage(w http.ResponseWriter, r *http.Request, se session) {
	id, err := opID(r)
	if err != nil {
		httpError(w, err)
		return
	}
	v, err := s.opView(r.Context(), se, id)
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "operation.html", v)
}

// opVerb approves, rejects, executes, or pauses, resumes or stops the
// tasks of (all, or the form's unit), an operation, as the ctl verbs of
// the same names do: each the user's call, authorized and audited.
func (s *Server) opVerb(w http.ResponseWriter, r *http.Request, se session) {
	id, err := opID(r)
	if err != nil {
		httpError(w, err)
		return
	}
	var units []string
	if u := r.PostFormValue("unit"); u != "" {
		if err := names.CheckUnit(u); err != nil {
			httpError(w, invalidf("%v", err))
			return
		}
		units = []string{u}
	}
	ctx, verb := r.Context(), r.PathValue("verb")
	var msg string
	var res *pb.TaskVerbResult
	switch verb {
	case "approve":
		_, err = call(ctx, s, se.user, "ApproveOperation", &pb.ApproveOperationRequest{Id: id, Digest: r.PostFormValue("digest")}, s.cfg.API.ApproveOperation)
		msg = fmt.Sprintf("operation %d approved", id)
	case "reject":
		_, err = call(ctx, s, se.user, "RejectOperation", &pb.RejectOperationRequest{Id: id, Reason: r.PostFormValue("reason")}, s.cfg.API.RejectOperation)
		msg = fmt.Sprintf("operation %d rejected", id)
	case "execute":
		_, err = call(ctx, s, se.user, "ExecuteOperation", &pb.ExecuteOperationRequest{Id: id}, s.cfg.API.ExecuteOperation)
		msg = fmt.Sprintf("operation %d executed: its tasks start", id)
	case "pause":
		var resp *pb.PauseTasksResponse
		resp, err = call(ctx, s, se.user, "PauseTasks", &pb.PauseTasksRequest{Id: id, Units: units}, s.cfg.API.PauseTasks)
		res = resp.GetResult()
	case "resume":
		var resp *pb.ResumeTasksResponse
		resp, err = call(ctx, s, se.user, "ResumeTasks", &pb.ResumeTasksRequest{Id: id, Units: units}, s.cfg.API.ResumeTasks)
		res = resp.GetResult()
	case "stop":
		var resp *pb.StopTasksResponse
		resp, err = call(ctx, s, se.user, "StopTasks", &pb.StopTasksRequest{Id: id, Units: units}, s.cfg.API.StopTasks)
		res = resp.GetResult()
	default:
		http.Error(w, "no such operation verb "+verb+": want approve, reject, execute, pause, resume or stop", http.StatusNotFound)
		return
	}
	if err != nil {
		httpError(w, err)
		return
	}
	if res != nil {
		msg = verbText(id, verb, res)
	}
	answer(w, r, msg, "")
}

// verbText says what a pause, resume or stop did: "operation 3: pause:
// kv/0 changed; kv/1 refused (done)".
func verbText(id int64, verb string, res *pb.TaskVerbResult) string {
	var parts []string
	if len(res.Changed) > 0 {
		parts = append(parts, strings.Join(res.Changed, ", ")+" changed")
	}
	if len(res.Already) > 0 {
		parts = append(parts, strings.Join(res.Already, ", ")+" already so")
	}
	for _, r := range res.Refused {
		parts = append(parts, fmt.Sprintf("%s refused (%s)", r.Unit, r.Message))
	}
	if len(parts) == 0 {
		parts = append(parts, "no tasks")
	}
	return fmt.Sprintf("operation %d: %s: %s", id, verb, strings.Join(parts, "; "))
}

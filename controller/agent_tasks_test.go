package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// runOp makes a running operation of action backup on kv's units, as an
// operator's safe one would be: its tasks pending.
func (m *agentModel) runOp() int64 {
	m.t.Helper()
	svc, err := m.st.Service(m.ctx, "kv")
	m.ok("Service(kv)", err)
	op, err := m.st.CreateOperation(m.ctx, state.NewOperation{
		Service: "kv", Action: "backup", Units: []string{"kv/0", "kv/1"}, ParamsJSON: []byte(`{"to":"/b"}`),
		Charm: svc.Charm, Requester: "admin", Safe: true, Timeout: time.Minute, PauseGrace: 3 * time.Second,
	})
	m.ok("CreateOperation", err)
	return op.Id
}

// startOp makes a running operation with kv/0's task started.
func (m *agentModel) startOp() int64 {
	m.t.Helper()
	id := m.runOp()
	_, err := m.st.StartTask(m.ctx, id, "kv/0", "0")
	m.ok("StartTask", err)
	return id
}

func startTask(unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		resp, err := c.StartTask(m.ctx, &pb.StartTaskRequest{Operation: 1, Unit: unit})
		if err == nil && (resp.Attempt != 1 || resp.Action != "backup" || string(resp.ParamsJson) != `{"to":"/b"}` ||
			resp.TimeoutMs != 60_000 || resp.PauseGraceMs != 3000 || resp.Resumed) {
			t.Errorf("StartTask = %v", resp)
		}
		return err
	}
}

func taskState(t *testing.T, m *agentModel, unit, want string) {
	t.Helper()
	tk, err := m.st.Task(m.ctx, 1, unit)
	m.ok("Task", err)
	if got := state.TaskStateName(tk.State); got != want {
		t.Errorf("task %s is %s, want %s", unit, got, want)
	}
}

// Each task call is the unit's agent's, or its machine agent's: another
// unit's agent, or another machine's, is refused and changes nothing.
func TestAgentTaskCalls(t *testing.T) {
	run := func(m *agentModel) { m.runOp() }
	started := func(m *agentModel) { m.startOp() }
	finish := func(unit string, attempt int64) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			_, err := c.FinishTask(m.ctx, &pb.FinishTaskRequest{Operation: 1, Unit: unit, Attempt: attempt,
				Outcome: pb.TaskState_TASK_STATE_DONE, Results: map[string]string{"path": "/b/1"}})
			return err
		}
	}
	lost := func(unit string) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			_, err := c.ReportTaskLost(m.ctx, &pb.ReportTaskLostRequest{Operation: 1, Unit: unit, Attempt: 1, Why: "the agent restarted"})
			return err
		}
	}
	checkpoint := func(unit string) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			_, err := c.SetCheckpoint(m.ctx, &pb.SetCheckpointRequest{Operation: 1, Unit: unit, Attempt: 1, Values: map[string]string{"at": "7"}})
			if err != nil {
				return err
			}
			resp, err := c.GetCheckpoint(m.ctx, &pb.GetCheckpointRequest{Operation: 1, Unit: unit})
			if err == nil && resp.Values["at"] != "7" {
				t.Errorf("GetCheckpoint = %v, want at=7", resp.Values)
			}
			return err
		}
	}
	appendLog := func(unit string) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			resp, err := c.AppendTaskLog(m.ctx, &pb.AppendTaskLogRequest{Operation: 1, Unit: unit, Attempt: 1, Chunk: []byte("line\n")})
			if err == nil && resp.End != 5 {
				t.Errorf("AppendTaskLog = %v, want end 5", resp)
			}
			return err
		}
	}
	heartbeat := func(machine string) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			_, err := c.TaskHeartbeat(m.ctx, &pb.TaskHeartbeatRequest{Machine: machine})
			return err
		}
	}
	stopUnit := func(unit string) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			resp, err := c.StopUnitTasks(m.ctx, &pb.StopUnitTasksRequest{Unit: unit})
			if err == nil && resp.Stopped != 1 {
				t.Errorf("StopUnitTasks = %v, want 1 stopped", resp)
			}
			return err
		}
	}
	runAgentCases(t, []agentCase{
		{name: "start its own", as: "unit-kv/0", setup: run, call: startTask("kv/0"), check: func(t *testing.T, m *agentModel) { taskState(t, m, "kv/0", "running") }},
		{name: "start by its machine", as: "machine-0", setup: run, call: startTask("kv/0")},
		{name: "start another unit's", as: "unit-kv/1", setup: run, call: startTask("kv/0"), code: codes.PermissionDenied, msg: "unit kv/1's agent may not start the tasks of unit kv/0"},
		{name: "start by another machine", as: "machine-1", setup: run, call: startTask("kv/0"), code: codes.PermissionDenied, msg: "it is not on machine 1"},
		{name: "start twice", as: "unit-kv/0", setup: started, call: startTask("kv/0"), code: codes.FailedPrecondition, msg: "is running: only a pending task can be started"},
		{name: "start, no task", as: "unit-kv/0", call: startTask("kv/0"), code: codes.NotFound},
		{name: "finish", as: "unit-kv/0", setup: started, call: finish("kv/0", 1), check: func(t *testing.T, m *agentModel) { taskState(t, m, "kv/0", "done") }},
		{name: "finish, stale", as: "unit-kv/0", setup: started, call: finish("kv/0", 2), code: codes.FailedPrecondition, msg: "the report of attempt 2 is stale"},
		{name: "finish another's", as: "unit-kv/1", setup: started, call: finish("kv/0", 1), code: codes.PermissionDenied},
		{name: "lost", as: "unit-kv/0", setup: started, call: lost("kv/0"), check: func(t *testing.T, m *agentModel) { taskState(t, m, "kv/0", "lost") }},
		{name: "lost by another machine", as: "machine-1", setup: started, call: lost("kv/0"), code: codes.PermissionDenied},
		{name: "checkpoint", as: "unit-kv/0", setup: started, call: checkpoint("kv/0")},
		{name: "checkpoint another's", as: "unit-kv/1", setup: started, call: checkpoint("kv/0"), code: codes.PermissionDenied},
		{name: "log", as: "unit-kv/0", setup: started, call: appendLog("kv/0")},
		{name: "log by its machine", as: "machine-0", setup: started, call: appendLog("kv/0")},
		{name: "log another's", as: "unit-kv/1", setup: started, call: appendLog("kv/0"), code: codes.PermissionDenied},
		{name: "heartbeat", as: "machine-0", call: heartbeat("0")},
		{name: "heartbeat of a unit alone", as: "unit-kv/0", call: heartbeat("0")},
		{name: "heartbeat of another machine", as: "machine-0", call: heartbeat("1"), code: codes.PermissionDenied, msg: "machine 0's agent may not report the tasks of machine 1"},
		{name: "heartbeat of another unit's machine", as: "unit-kv/0", call: heartbeat("1"), code: codes.PermissionDenied, msg: "it is not on it"},
		{name: "stop an alive unit's", as: "unit-kv/1", setup: run, call: stopUnit("kv/1"), code: codes.FailedPrecondition, msg: "unit kv/1 is alive"},
		{name: "stop a dying unit's", as: "unit-kv/1", setup: func(m *agentModel) {
			m.runOp()
			m.ok("DestroyUnit", m.st.DestroyUnit(m.ctx, "kv/1", state.DestroyOptions{}))
		}, call: stopUnit("kv/1"), check: func(t *testing.T, m *agentModel) { taskState(t, m, "kv/1", "stopped") }},
	})
}

// A unit's agent watches its open tasks, each change named by its
// operation with what the agent is to do; another unit's agent may not.
func TestAgentWatchUnitTasks(t *testing.T) {
	m := newAgentModel(t)
	id := m.runOp()
	resp, err := firstWatchResponse(m.ctx, m.as("unit-kv/0"), &pb.WatchRequest{Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_UnitTasks{UnitTasks: "kv/0"}}})
	m.ok("Watch(unit tasks)", err)
	if len(resp.Changes) != 1 || resp.Changes[0].Id != "00000000000000000001" || resp.Changes[0].GetTask() != "pending" || id != 1 {
		t.Errorf("Watch(unit tasks of kv/0) = %v, want operation 1 pending", resp.Changes)
	}
	_, err = firstWatchResponse(m.ctx, m.as("unit-kv/1"), &pb.WatchRequest{Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_UnitTasks{UnitTasks: "kv/0"}}})
	wantCode(t, "Watch(another unit's tasks)", err, codes.PermissionDenied, "unit kv/1's agent may not watch the tasks of unit kv/0")
}

// A task's log chunks count against the agent's write budget.
func TestAgentTaskLogBudget(t *testing.T) {
	m := newAgentModelWith(t, controllertest.Options{Anonymous: true, Budgets: controller.Budgets{Writes: 0.01, Burst: 3, Bytes: -1}})
	id := m.startOp()
	ok, err := untilRefused(20, func(int) error {
		_, err := m.as("unit-kv/0").AppendTaskLog(m.ctx, &pb.AppendTaskLogRequest{Operation: id, Unit: "kv/0", Attempt: 1, Chunk: []byte("x\n")})
		return err
	})
	if s, _ := status.FromError(err); ok != 3 || s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "over its budget") {
		t.Errorf("after %d appends: %v; want ResourceExhausted after 3", ok, err)
	}
}

// recvLogs reads a TaskLogs stream's next response.
func recvLogs(t *testing.T, stream pb.OperatorService_TaskLogsClient) *pb.TaskLogsResponse {
	t.Helper()
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("TaskLogs: Recv = %v", err)
	}
	return resp
}

// TaskLogs sends what a task's log keeps, with the count of bytes dropped
// before it; following, the lines appended after, until the task closes.
func TestTaskLogs(t *testing.T) {
	m := newAgentModel(t)
	id := m.startOp()
	big := strings.Repeat("x", state.MaxTaskLogChunkBytes-1) + "\n"
	for range state.MaxTaskLogBytes/len(big) + 3 {
		_, err := m.st.AppendTaskLog(m.ctx, id, "kv/0", 1, []byte(big))
		m.ok("AppendTaskLog", err)
	}
	_, err := m.st.AppendTaskLog(m.ctx, id, "kv/0", 1, []byte("last\n"))
	m.ok("AppendTaskLog", err)
	op := m.admin()
	stream, err := op.TaskLogs(m.ctx, &pb.TaskLogsRequest{Operation: id, TailBytes: 10})
	m.ok("TaskLogs", err)
	if resp := recvLogs(t, stream); resp.Unit != "kv/0" || string(resp.Data) != "last\n" || resp.Dropped != 0 {
		t.Errorf("TaskLogs(tail 10) = %s %q dropped %d, want kv/0's last line", resp.Unit, resp.Data, resp.Dropped)
	}
	stream, err = op.TaskLogs(m.ctx, &pb.TaskLogsRequest{Operation: id, Unit: "kv/0"})
	m.ok("TaskLogs", err)
	var got int
	first := recvLogs(t, stream)
	if first.Dropped == 0 {
		t.Errorf("TaskLogs of a trimmed log: dropped 0, want the bytes trimmed")
	}
	got += len(first.Data)
	for {
		resp, err := stream.Recv()
		if err != nil {
			break
		}
		got += len(resp.Data)
	}
	if got < state.MaxTaskLogBytes {
		t.Errorf("TaskLogs sent %d bytes, want the last %d at least", got, state.MaxTaskLogBytes)
	}

	// Following kv/1's task: its lines as they come, until it closes.
	_, err = m.st.StartTask(m.ctx, id, "kv/1", "1")
	m.ok("StartTask", err)
	_, err = m.st.AppendTaskLog(m.ctx, id, "kv/1", 1, []byte("one\n"))
	m.ok("AppendTaskLog", err)
	stream, err = op.TaskLogs(m.ctx, &pb.TaskLogsRequest{Operation: id, Unit: "kv/1", Follow: true})
	m.ok("TaskLogs(follow)", err)
	if resp := recvLogs(t, stream); string(resp.Data) != "one\n" {
		t.Errorf("TaskLogs(follow) first = %q, want one", resp.Data)
	}
	_, err = m.st.AppendTaskLog(m.ctx, id, "kv/1", 1, []byte("two\n"))
	m.ok("AppendTaskLog", err)
	if resp := recvLogs(t, stream); string(resp.Data) != "two\n" {
		t.Errorf("TaskLogs(follow) next = %q, want two", resp.Data)
	}
	_, err = m.st.FinishTask(m.ctx, state.TaskReport{Operation: id, Unit: "kv/1", Attempt: 1, Outcome: pb.TaskState_TASK_STATE_DONE})
	m.ok("FinishTask", err)
	if resp, err := stream.Recv(); err == nil {
		t.Errorf("TaskLogs(follow) after the task closed = %v, want its end", resp)
	}

	_, err = op.TaskLogs(m.ctx, &pb.TaskLogsRequest{Operation: id, Unit: "kv/9"})
	if err == nil {
		_, err = mustStream(op.TaskLogs(m.ctx, &pb.TaskLogsRequest{Operation: id, Unit: "kv/9"}))
	}
	wantCode(t, "TaskLogs(no such task)", err, codes.NotFound, "operation 1 has no task on unit kv/9")
}

// mustStream returns a stream's first answer's error.
func mustStream(stream pb.OperatorService_TaskLogsClient, err error) (*pb.TaskLogsResponse, error) {
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// At most 4 TaskLogs streams of one user follow at once.
func TestTaskLogsFollowLimit(t *testing.T) {
	m := newAgentModel(t)
	id := m.startOp()
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	op := m.admin()
	for i := range 4 {
		stream, err := op.TaskLogs(ctx, &pb.TaskLogsRequest{Operation: id, Unit: "kv/0", Follow: true})
		m.ok("TaskLogs", err)
		// Following: the stream sends nothing until a line comes; a
		// header read tells the call was taken.
		if _, err := stream.Header(); err != nil {
			t.Fatalf("follow %d: %v", i, err)
		}
	}
	_, err := mustStream(op.TaskLogs(ctx, &pb.TaskLogsRequest{Operation: id, Unit: "kv/0", Follow: true}))
	wantCode(t, "a fifth follow", err, codes.ResourceExhausted, "user admin follows task logs on 4 streams")
}

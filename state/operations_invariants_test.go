package state_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestCheckOperationsFindsBrokenRecords feeds the invariant checker
// snapshots of a model of operations, each broken one way, and wants each
// found.
func TestCheckOperationsFindsBrokenRecords(t *testing.T) {
	f := newOpsFixture(t, 3)
	run := f.create(t, f.op(true, 1)) // operation 1: kv/0 running, kv/1 and kv/2 queued
	f.start(t, run.Id, "kv/0")
	done := f.create(t, f.op(true, 0, "kv/1")) // operation 2: done
	f.start(t, done.Id, "kv/1")
	f.finish(t, done.Id, "kv/1", 1, pb.TaskState_TASK_STATE_DONE)
	f.create(t, f.op(false, 0)) // operation 3: awaiting approval
	_, err := f.st.AppendTaskLog(f.ctx, run.Id, "kv/0", 1, []byte("line\n"))
	must(t, "AppendTaskLog", err)
	machine := f.machineOf(t, "kv/0")
	base, err := f.st.Snapshot(f.ctx)
	must(t, "Snapshot", err)
	if err := state.CheckInvariants(base); err != nil {
		t.Fatalf("the model is broken before the test breaks it: %v", err)
	}

	editOp := func(id int64, edit func(*pb.Operation)) func(map[string][]byte) {
		return func(v map[string][]byte) {
			op := &pb.Operation{}
			must(t, "unmarshal", proto.Unmarshal(v[state.OperationKey(id)], op))
			edit(op)
			b, _ := proto.Marshal(op)
			v[state.OperationKey(id)] = b
		}
	}
	editTask := func(id int64, unit string, edit func(*pb.Task)) func(map[string][]byte) {
		return func(v map[string][]byte) {
			tk := &pb.Task{}
			must(t, "unmarshal", proto.Unmarshal(v[state.TaskKey(id, unit)], tk))
			edit(tk)
			b, _ := proto.Marshal(tk)
			v[state.TaskKey(id, unit)] = b
		}
	}
	for _, tc := range []struct {
		name   string
		break_ func(map[string][]byte)
		want   string
	}{
		{"open reference missing", func(v map[string][]byte) { delete(v, "refs/op-open/00000000000000000001/kv/0") },
			"refs: refs/op-open/00000000000000000001/kv/0 (\"running\") is missing"},
		{"unit-tasks value", func(v map[string][]byte) { v[state.UnitTasksPrefix("kv/1")+"00000000000000000001"] = []byte("pending") },
			"holds \"pending\", want \"queued\""},
		{"stray slot", func(v map[string][]byte) { v["refs/op-slots/00000000000000000001/kv/2"] = nil },
			"refs/op-slots/00000000000000000001/kv/2 is not a reference"},
		{"queued beside a free slot", func(v map[string][]byte) { delete(v, "refs/op-slots/00000000000000000001/kv/0") },
			"2 tasks queued while 1 of its 1 slots are free"},
		{"no heartbeat", func(v map[string][]byte) { delete(v, state.HeartbeatKey(machine)) },
			"is running on machine " + machine + ", which has no heartbeat record"},
		{"unit gone", func(v map[string][]byte) { delete(v, state.UnitKey("kv/0")) },
			"its unit gone without a unit-tasks cleanup item"},
		{"digest", editOp(3, func(op *pb.Operation) { op.Units = []string{"kv/0"} }),
			"operation 3: digest"},
		{"ended with an open task", editOp(1, func(op *pb.Operation) {
			op.State, op.FinishedUnixNano = pb.OperationState_OPERATION_STATE_DONE, 1
		}), "task kv/0 of operation 1 is running, but the operation is done"},
		{"running with all closed", editOp(2, func(op *pb.Operation) {
			op.State, op.FinishedUnixNano = pb.OperationState_OPERATION_STATE_RUNNING, 0
		}), "operation 2 is running with all its tasks closed"},
		{"tasks before approval", func(v map[string][]byte) {
			v[state.TaskKey(3, "kv/0")] = v[state.TaskKey(2, "kv/1")]
		}, "task key tasks/00000000000000000003/kv/0 holds task kv/1 of operation 2"},
		{"never started", editTask(1, "kv/0", func(tk *pb.Task) { tk.Attempt = 0 }),
			"task kv/0 of operation 1 is running at attempt 0"},
		{"done with a failed task", editTask(2, "kv/1", func(tk *pb.Task) { tk.State = pb.TaskState_TASK_STATE_FAILED }),
			"operation 2 is done with 1 failed"},
		{"past the sequence", func(v map[string][]byte) { v["seq/operation"] = []byte("2") },
			"I7: operation 3 is past its sequence 2"},
		{"task log of no task", func(v map[string][]byte) { v[state.TaskLogPrefix(3, "kv/0")+"00000000000000000000"] = []byte("x") },
			"task log chunk task-logs/00000000000000000003/kv/0/00000000000000000000 of a task that does not exist"},
		{"task log chunks overlapping", func(v map[string][]byte) { v[state.TaskLogPrefix(1, "kv/0")+"00000000000000000002"] = []byte("x") },
			"starts at 2, inside the previous chunk (ends at 5)"},
		{"task log key", func(v map[string][]byte) { v["task-logs/00000000000000000001/kv/0/7"] = []byte("x") },
			"want task-logs/<operation>/<unit>/<offset>"},
		{"open operation reference", func(v map[string][]byte) { v["operation-refs/open/00000000000000000002"] = []byte("running") },
			"operation-refs/open/00000000000000000002 is not a reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &state.Snapshot{Revision: base.Revision, Values: map[string][]byte{}}
			for k, v := range base.Values {
				snap.Values[k] = v
			}
			tc.break_(snap.Values)
			err := state.CheckInvariants(snap)
			if err == nil || !containsLine(err.Error(), tc.want) {
				t.Errorf("CheckInvariants = %v, want a line saying %q", err, tc.want)
			}
		})
	}
}

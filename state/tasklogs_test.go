package state_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// readLog reads the unit's whole kept log in operation id, page by page.
func readLog(t *testing.T, f *opsFixture, id int64, unit string, from int64) *state.TaskLog {
	t.Helper()
	out := &state.TaskLog{}
	first := true
	for {
		l, err := f.st.TaskLog(f.ctx, id, unit, from)
		must(t, "TaskLog", err)
		if first {
			out.Start, out.Dropped = l.Start, l.Dropped
			first = false
		}
		out.Data = append(out.Data, l.Data...)
		out.End = l.End
		if !l.More {
			return out
		}
		from = l.End
	}
}

func TestTaskLogAppendAndRead(t *testing.T) {
	f := newOpsFixture(t, 2)
	op := f.create(t, f.op(true, 0))
	_, err := f.st.AppendTaskLog(f.ctx, op.Id, "kv/0", 1, []byte("x\n"))
	wantErr(t, "AppendTaskLog(not started)", err, state.ErrRefused, "T2", "has not started")
	f.start(t, op.Id, "kv/0")
	for _, tc := range []struct {
		attempt int64
		data    string
		end     int64
		err     error
		want    string
	}{
		{1, "one\n", 4, nil, ""},
		{1, "two\nthree\n", 14, nil, ""},
		{2, "stale\n", 0, state.ErrRefused, "the report of attempt 2 is stale"},
		{1, "", 0, state.ErrInvalid, "1 to 16384 bytes, not 0"},
		{1, strings.Repeat("a", state.MaxTaskLogChunkBytes+1), 0, state.ErrInvalid, "not 16385"},
	} {
		end, err := f.st.AppendTaskLog(f.ctx, op.Id, "kv/0", tc.attempt, []byte(tc.data))
		if tc.err != nil {
			wantErr(t, fmt.Sprintf("AppendTaskLog(%q)", tc.data), err, tc.err, "", tc.want)
			continue
		}
		must(t, "AppendTaskLog", err)
		if end != tc.end {
			t.Errorf("AppendTaskLog(%q) = %d, want %d", tc.data, end, tc.end)
		}
	}
	for _, tc := range []struct {
		from  int64
		want  string
		start int64
	}{
		{0, "one\ntwo\nthree\n", 0},
		{4, "two\nthree\n", 4},
		{8, "three\n", 8},
		{-6, "three\n", 8},
		{14, "", 14},
		{99, "", 14},
	} {
		l := readLog(t, f, op.Id, "kv/0", tc.from)
		if string(l.Data) != tc.want || l.Start != tc.start || l.End != 14 || l.Dropped != 0 {
			t.Errorf("TaskLog(from %d) = %q [%d, %d) dropped %d, want %q [%d, 14) dropped 0", tc.from, l.Data, l.Start, l.End, l.Dropped, tc.want, tc.start)
		}
	}
	if l := readLog(t, f, op.Id, "kv/1", 0); len(l.Data) != 0 || l.End != 0 {
		t.Errorf("TaskLog(kv/1, no log) = %q end %d, want nothing", l.Data, l.End)
	}
	// The last lines of an attempt may come after its end.
	f.finish(t, op.Id, "kv/0", 1, pb.TaskState_TASK_STATE_DONE)
	_, err = f.st.AppendTaskLog(f.ctx, op.Id, "kv/0", 1, []byte("four\n"))
	must(t, "AppendTaskLog(after the end)", err)
}

// A task keeps the chunks holding its last MaxTaskLogBytes: older ones
// go in the appends' transactions, and the first chunk kept says how many
// bytes were dropped.
func TestTaskLogTrim(t *testing.T) {
	f := newOpsFixture(t, 1)
	op := f.create(t, f.op(true, 0))
	f.start(t, op.Id, "kv/0")
	chunk := state.MaxTaskLogChunkBytes
	var all bytes.Buffer
	n := state.MaxTaskLogBytes/chunk + 8
	for i := range n {
		line := []byte(fmt.Sprintf("%06d ", i))
		data := append(bytes.Repeat([]byte{'.'}, chunk-len(line)-1), '\n')
		data = append(line, data[:chunk-len(line)]...)
		all.Write(data)
		_, err := f.st.AppendTaskLog(f.ctx, op.Id, "kv/0", 1, data)
		must(t, "AppendTaskLog", err)
	}
	l := readLog(t, f, op.Id, "kv/0", 0)
	total := int64(all.Len())
	kept := l.End - l.Start
	if l.End != total || kept < state.MaxTaskLogBytes || kept > state.MaxTaskLogBytes+int64(2*chunk) {
		t.Errorf("TaskLog kept [%d, %d) of %d, want the last %d bytes and at most two chunks more", l.Start, l.End, total, state.MaxTaskLogBytes)
	}
	if l.Dropped != l.Start || l.Dropped != total-kept {
		t.Errorf("TaskLog dropped = %d, want %d (where it starts)", l.Dropped, total-kept)
	}
	if !bytes.Equal(l.Data, all.Bytes()[l.Start:]) {
		t.Errorf("TaskLog's data is not the log's last %d bytes", kept)
	}
}

// The logs go with their operation.
func TestTaskLogPruned(t *testing.T) {
	f := newOpsFixture(t, 1)
	op := f.create(t, f.op(true, 0))
	f.start(t, op.Id, "kv/0")
	_, err := f.st.AppendTaskLog(f.ctx, op.Id, "kv/0", 1, []byte("line\n"))
	must(t, "AppendTaskLog", err)
	f.finish(t, op.Id, "kv/0", 1, pb.TaskState_TASK_STATE_DONE)
	f.clock.Advance(25 * time.Hour)
	_, pruned, err := f.st.PruneOperations(f.ctx, 24*time.Hour, 10)
	must(t, "PruneOperations", err)
	if pruned != 1 {
		t.Fatalf("PruneOperations pruned %d, want 1", pruned)
	}
	snap, err := f.st.Snapshot(f.ctx)
	must(t, "Snapshot", err)
	for k := range snap.Values {
		if strings.HasPrefix(k, "task-logs/") {
			t.Errorf("task log key %s outlived its operation", k)
		}
	}
}

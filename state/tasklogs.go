package state

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A task's log (its action's stdout, stderr and action-log lines, of all
// its attempts) is kept in chunks, task-logs/<op>/<unit>/<offset>: each
// chunk's value is its bytes, its key's offset (20 digits) where they
// start in the task's log. The agent appends a chunk at most once a
// second a task (AppendTaskLog); the chunks that lie wholly before the
// last MaxTaskLogBytes are deleted in the append's transaction, by one
// range deletion. So the first chunk kept starts at the count of bytes
// dropped, which a reader shows as a marker, and no record counts them.
// The chunks go with their operation (PruneOperations).

const taskLogsPrefix = "task-logs/"

// The task logs' bounds: a chunk holds at most MaxTaskLogChunkBytes; a
// task keeps the chunks holding its last MaxTaskLogBytes (at most one
// chunk more).
const (
	MaxTaskLogChunkBytes = 16 << 10
	MaxTaskLogBytes      = 1 << 20
)

// TaskLogsPrefix is the prefix of operation id's task logs: the follow of
// ctl logs watches it.
func TaskLogsPrefix(id int64) string { return taskLogsPrefix + opID(id) + "/" }

// TaskLogPrefix is the prefix of the named unit's task log in operation
// id.
func TaskLogPrefix(id int64, unit string) string { return TaskLogsPrefix(id) + unit + "/" }

func taskLogKey(id int64, unit string, offset int64) string {
	return TaskLogPrefix(id, unit) + fmt.Sprintf("%020d", offset)
}

// parseTaskLogKey parses task-logs/<op>/<unit>/<offset>.
func parseTaskLogKey(key string) (id int64, unit string, offset int64, err error) {
	rest, ok := strings.CutPrefix(key, taskLogsPrefix)
	opStr, rest, ok2 := strings.Cut(rest, "/")
	i := strings.LastIndexByte(rest, '/')
	if !ok || !ok2 || i < 0 {
		return 0, "", 0, fmt.Errorf("task log key %s: want task-logs/<operation>/<unit>/<offset>", key)
	}
	if id, err = parseOpID(opStr); err != nil {
		return 0, "", 0, fmt.Errorf("task log key %s: %w", key, err)
	}
	unit, offStr := rest[:i], rest[i+1:]
	offset, err = strconv.ParseInt(offStr, 10, 64)
	if err != nil || len(offStr) != 20 || offset < 0 || checkUnitName(unit) != nil {
		return 0, "", 0, fmt.Errorf("task log key %s: want task-logs/<operation>/<unit>/<offset>", key)
	}
	return id, unit, offset, nil
}

// AppendTaskLog appends data (1 to MaxTaskLogChunkBytes bytes) to the
// named unit's task log in operation id, for the task's current attempt
// (T2: a stale attempt's lines are refused), whatever its state: the last
// lines of an attempt may come after its end. It deletes, in the same
// transaction, the chunks that lie wholly before the last MaxTaskLogBytes,
// and returns the log's end (its offset after data).
func (s *State) AppendTaskLog(ctx context.Context, id int64, unit string, attempt int64, data []byte) (int64, error) {
	if err := checkUnitName(unit); err != nil {
		return 0, err
	}
	if len(data) == 0 || len(data) > MaxTaskLogChunkBytes {
		return 0, invalidf("a task log chunk holds 1 to %d bytes, not %d", MaxTaskLogChunkBytes, len(data))
	}
	prefix := TaskLogPrefix(id, unit)
	var end int64
	err := s.apply(ctx, "append to the log of "+taskName(id, unit), func(ctx context.Context) (*change, error) {
		last := getPrefix(prefix, 1)
		last.NewestFirst = true
		r, err := s.read(ctx, get(TaskKey(id, unit)), last)
		if err != nil {
			return nil, err
		}
		t, err := decode[pb.Task](r.one(0))
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, notFoundf("%s not found", taskName(id, unit))
		}
		if t.v.Attempt == 0 {
			return nil, refused("T2", "%s has not started: it has no log yet", taskName(id, unit))
		}
		if err := checkAttempt(id, unit, t.v, attempt); err != nil {
			return nil, err
		}
		var off int64
		if kv := r.one(1); kv != nil {
			_, _, o, err := parseTaskLogKey(string(kv.Key))
			if err != nil {
				return nil, invalidf("corrupt task log: %v", err)
			}
			off = o + int64(len(kv.Value))
		}
		end = off + int64(len(data))
		c := &change{}
		c.ifMod(t.key, t.mod)
		c.ifNoNewer(prefix, r.rev)
		c.putRaw(taskLogKey(id, unit, off), string(data))
		// A chunk starting at or before cut ends before the last
		// MaxTaskLogBytes.
		if cut := end - MaxTaskLogBytes - MaxTaskLogChunkBytes; cut >= 0 {
			c.delRange(prefix, taskLogKey(id, unit, cut+1))
		}
		return c, nil
	})
	return end, err
}

// TaskLog is part of a task's log as kept.
type TaskLog struct {
	// Data is the log from Start to End.
	Data       []byte
	Start, End int64
	// Dropped is how many bytes at the log's beginning are no longer
	// kept (the first kept chunk's offset).
	Dropped int64
	// More says the log goes on past End: read again from End.
	More bool
	// Revision is the revision the log was read at.
	Revision int64
}

// taskLogPage bounds the chunks one TaskLog reads.
const taskLogPage = 64

// TaskLog reads the named unit's task log in operation id from offset
// from on (from 0: from its first byte kept; a negative from is that many
// bytes before its end), up to taskLogPage chunks. A from inside a chunk
// starts Data there. It does not look whether the task exists: a task
// without a log reads empty.
func (s *State) TaskLog(ctx context.Context, id int64, unit string, from int64) (*TaskLog, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	prefix := TaskLogPrefix(id, unit)
	first := getKeys(prefix, 1)
	lastG := getKeys(prefix, 1)
	lastG.NewestFirst = true
	// The last chunk's value too, for its length.
	lastG.KeysOnly = false
	r, err := s.read(ctx, first, lastG)
	if err != nil {
		return nil, err
	}
	out := &TaskLog{Revision: r.rev}
	fkv, lkv := r.one(0), r.one(1)
	if fkv == nil || lkv == nil {
		return out, nil
	}
	_, _, dropped, err := parseTaskLogKey(string(fkv.Key))
	if err != nil {
		return nil, invalidf("corrupt task log: %v", err)
	}
	_, _, lastOff, err := parseTaskLogKey(string(lkv.Key))
	if err != nil {
		return nil, invalidf("corrupt task log: %v", err)
	}
	logEnd := lastOff + int64(len(lkv.Value))
	out.Dropped = dropped
	if from < 0 {
		from = max(logEnd+from, 0)
	}
	from = max(from, dropped)
	out.Start, out.End = from, from
	if from >= logEnd {
		out.Start, out.End = logEnd, logEnd
		return out, nil
	}
	// The chunk holding from starts at most a chunk's size before it.
	g := getOp{Key: taskLogKey(id, unit, max(from-MaxTaskLogChunkBytes+1, 0)), End: prefixEnd(prefix), Limit: taskLogPage, Rev: r.rev}
	resp, err := s.readRange(ctx, g)
	if err != nil {
		return nil, err
	}
	for _, kv := range resp.Kvs {
		_, _, off, err := parseTaskLogKey(string(kv.Key))
		if err != nil {
			return nil, invalidf("corrupt task log: %v", err)
		}
		chunkEnd := off + int64(len(kv.Value))
		if chunkEnd <= from {
			continue
		}
		if len(out.Data) == 0 {
			out.Start = max(from, off)
		}
		out.Data = append(out.Data, kv.Value[max(from-off, 0):]...)
		out.End = chunkEnd
	}
	out.More = resp.More
	return out, nil
}

// checkTaskLogs checks the task logs: their keys well formed, each of a
// task that exists, within its chunk's size, the chunks of a task apart
// and within what a task keeps.
func checkTaskLogs(snap *Snapshot, tasks func(id int64, unit string) bool, bad func(string, ...any)) {
	type span struct{ start, end int64 }
	spans := map[string]*span{}
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, taskLogsPrefix) {
			continue
		}
		id, unit, off, err := parseTaskLogKey(k)
		if err != nil {
			bad("%v", err)
			continue
		}
		if !tasks(id, unit) {
			bad("task log chunk %s of a task that does not exist", k)
		}
		if len(v) == 0 || len(v) > MaxTaskLogChunkBytes {
			bad("task log chunk %s holds %d bytes: want 1 to %d", k, len(v), MaxTaskLogChunkBytes)
		}
		sp := spans[TaskLogPrefix(id, unit)]
		if sp == nil {
			sp = &span{start: off}
			spans[TaskLogPrefix(id, unit)] = sp
		}
		sp.start, sp.end = min(sp.start, off), max(sp.end, off+int64(len(v)))
	}
	for p, sp := range spans {
		if sp.end-sp.start > MaxTaskLogBytes+2*MaxTaskLogChunkBytes {
			bad("task log %s keeps %d bytes, over %d", p, sp.end-sp.start, MaxTaskLogBytes+2*MaxTaskLogChunkBytes)
		}
	}
	// Chunks do not overlap: each starts at or after the previous one's end.
	var keys []string
	for k := range snap.Values {
		if strings.HasPrefix(k, taskLogsPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var prevPrefix string
	var prevEnd int64
	for _, k := range keys {
		id, unit, off, err := parseTaskLogKey(k)
		if err != nil {
			continue
		}
		p := TaskLogPrefix(id, unit)
		if p == prevPrefix && off < prevEnd {
			bad("task log chunk %s starts at %d, inside the previous chunk (ends at %d)", k, off, prevEnd)
		}
		prevPrefix, prevEnd = p, off+int64(len(snap.Values[k]))
	}
}

package controller

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The bounds of TaskLogs: the streams that follow logs, on a controller
// and of one user (as the audit log's followers), and how often a follower
// looks whether its tasks closed.
const (
	maxTaskLogFollows        = 32
	maxTaskLogFollowsPerUser = 4
	taskLogClosedEvery       = time.Second
	// taskLogsPage is how many tasks one read of an operation's brings.
	taskLogsPage = 1000
)

// TaskLogs sends the logs of an operation's tasks (or of one), each unit's
// lines in order; with follow, then the lines appended after, read as the
// watch hub tells of new chunks, until the tasks are closed.
func (s *Server) TaskLogs(req *pb.TaskLogsRequest, stream pb.OperatorService_TaskLogsServer) error {
	ctx := stream.Context()
	id := req.GetOperation()
	if err := checkTaskID(id); err != nil {
		return err
	}
	if req.GetTailBytes() < 0 {
		return invalid("tail of %d bytes: want 0 or more", req.GetTailBytes())
	}
	op, err := s.st.Operation(ctx, id)
	if err != nil {
		return err
	}
	if u := req.GetUnit(); u != "" {
		if err := checkUnitName(u); err != nil {
			return err
		}
		if _, ok := slices.BinarySearch(op.Units, u); !ok {
			return notFound("operation %d has no task on unit %s", id, u)
		}
	}
	if req.GetFollow() {
		user := callerFrom(ctx).id
		if err := s.logFollows.take(user); err != nil {
			return err
		}
		defer s.logFollows.release(user)
		// Following, the stream may carry nothing for a while: its
		// header tells the client it was taken.
		if err := stream.SendHeader(metadata.MD{}); err != nil {
			return err
		}
	}
	f := &logFollower{s: s, stream: stream, id: id, tail: req.GetTailBytes(), next: map[string]int64{}}
	rev, err := s.st.Revision(ctx)
	if err != nil {
		return err
	}
	units := []string{req.GetUnit()}
	if req.GetUnit() == "" {
		if units, err = s.startedTasks(ctx, id); err != nil {
			return err
		}
	}
	for _, u := range units {
		if err := f.send(ctx, u); err != nil {
			return err
		}
	}
	if !req.GetFollow() {
		return nil
	}
	prefix := state.TaskLogsPrefix(id)
	if req.GetUnit() != "" {
		prefix = state.TaskLogPrefix(id, req.GetUnit())
	}
	w, err := s.cfg.Watches.Watch(ctx, prefix, rev)
	if err != nil {
		return err
	}
	defer w.Close()
	batches := make(chan state.WatchBatch)
	werr := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			b, err := w.Next(wctx)
			if err != nil {
				werr <- err
				return
			}
			select {
			case batches <- b:
			case <-wctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(taskLogClosedEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-werr:
			if ctx.Err() != nil {
				return nil
			}
			return watchErr(ctx, err)
		case b := <-batches:
			dirty := map[string]bool{}
			for _, e := range b.Events {
				if u := logUnit(id, e.Key); u != "" && e.Type != state.EventDelete {
					dirty[u] = true
				}
			}
			for _, u := range slices.Sorted(maps.Keys(dirty)) {
				if err := f.send(ctx, u); err != nil {
					return err
				}
			}
		case <-tick.C:
			closed, err := s.tasksClosed(ctx, id, req.GetUnit())
			if err != nil {
				return err
			}
			if closed {
				// The agents append a task's last lines before they
				// end it: one more read has them all.
				for _, u := range slices.Sorted(maps.Keys(f.next)) {
					if err := f.send(ctx, u); err != nil {
						return err
					}
				}
				if req.GetUnit() == "" {
					if units, err = s.startedTasks(ctx, id); err != nil {
						return err
					}
					for _, u := range units {
						if _, ok := f.next[u]; !ok {
							if err := f.send(ctx, u); err != nil {
								return err
							}
						}
					}
				}
				return nil
			}
		}
	}
}

// logUnit is the unit of a task log chunk's key of operation id, "" for
// another key.
func logUnit(id int64, key string) string {
	rest, ok := strings.CutPrefix(key, state.TaskLogsPrefix(id))
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 {
		return ""
	}
	return rest[:i]
}

// startedTasks lists the units of operation id's tasks that have started
// (have had a log).
func (s *Server) startedTasks(ctx context.Context, id int64) ([]string, error) {
	var out []string
	after := ""
	for {
		tasks, err := s.st.Tasks(ctx, id, after, taskLogsPage)
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			if t.Attempt > 0 {
				out = append(out, t.Unit)
			}
		}
		if len(tasks) < taskLogsPage {
			return out, nil
		}
		after = tasks[len(tasks)-1].Unit
	}
}

// tasksClosed says whether the task of unit in operation id (all of its
// tasks when unit is "") is closed.
func (s *Server) tasksClosed(ctx context.Context, id int64, unit string) (bool, error) {
	if unit != "" {
		t, err := s.st.Task(ctx, id, unit)
		if err != nil {
			return false, err
		}
		switch t.State {
		case pb.TaskState_TASK_STATE_DONE, pb.TaskState_TASK_STATE_FAILED, pb.TaskState_TASK_STATE_STOPPED:
			return true, nil
		}
		return false, nil
	}
	op, err := s.st.Operation(ctx, id)
	if err != nil {
		return false, err
	}
	switch op.State {
	case pb.OperationState_OPERATION_STATE_DONE, pb.OperationState_OPERATION_STATE_FAILED, pb.OperationState_OPERATION_STATE_STOPPED:
		return true, nil
	case pb.OperationState_OPERATION_STATE_RUNNING:
		return false, nil
	}
	// Never ran (invalid, rejected, expired): nothing will come.
	return op.State != pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL && op.State != pb.OperationState_OPERATION_STATE_APPROVED, nil
}

// logFollower sends the units' logs of one TaskLogs stream, each from
// where it left off.
type logFollower struct {
	s      *Server
	stream pb.OperatorService_TaskLogsServer
	id     int64
	tail   int64
	// next is where each unit's log goes on.
	next map[string]int64
}

// send sends what the unit's log holds from where it left off (the
// first time, from its start, or its tail).
func (f *logFollower) send(ctx context.Context, unit string) error {
	from, seen := f.next[unit]
	if !seen && f.tail > 0 {
		from = -f.tail
	}
	for {
		l, err := f.s.st.TaskLog(ctx, f.id, unit, from)
		if err != nil {
			return err
		}
		data := l.Data
		var dropped int64
		switch {
		case !seen && from < 0 && l.Start > 0:
			// A tail starts at a line's start.
			if i := bytes.IndexByte(data, '\n'); i >= 0 && l.Start > l.Dropped {
				data = data[i+1:]
			}
			if l.Start == l.Dropped {
				dropped = l.Dropped
			}
		case l.Start > from && from >= 0:
			// Trimmed away before it was read.
			dropped = l.Start - from
		}
		seen = true
		f.next[unit] = l.End
		if len(data) > 0 || dropped > 0 {
			if err := f.stream.Send(&pb.TaskLogsResponse{Unit: unit, Dropped: dropped, Data: data}); err != nil {
				return err
			}
		}
		if !l.More {
			return nil
		}
		from = l.End
	}
}

// logFollows counts the streams that follow logs on this controller (the
// TaskLogs streams, or the DebugLog ones), in all and by user: at most max
// and perUser of them, the task logs' bounds when zero.
type logFollows struct {
	max, perUser int
	// what the streams follow, for the refusals: "task logs".
	what   string
	mu     sync.Mutex
	total  int
	byUser map[string]int
}

// take counts one more stream of user's, or says why it cannot.
func (f *logFollows) take(user string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	most, perUser, what := f.max, f.perUser, f.what
	if most == 0 {
		most, perUser, what = maxTaskLogFollows, maxTaskLogFollowsPerUser, "task logs"
	}
	switch {
	case f.total >= most:
		return status.Errorf(codes.ResourceExhausted, "%d streams follow %s on this controller, the most it serves: try again later", most, what)
	case f.byUser[user] >= perUser:
		return status.Errorf(codes.ResourceExhausted, "user %s follows %s on %d streams of this controller, the most one user may: end one first", user, what, perUser)
	}
	if f.byUser == nil {
		f.byUser = map[string]int{}
	}
	f.total++
	f.byUser[user]++
	return nil
}

// release counts one of user's streams ended.
func (f *logFollows) release(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total--
	if f.byUser[user]--; f.byUser[user] <= 0 {
		delete(f.byUser, user)
	}
}

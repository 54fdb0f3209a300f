package unitagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// actionContext is the hooks.ActionContext of a task's run: the action
// tools (its parameters, results, failure, log and checkpoint) and the
// hook tools that make sense beside hooks running (config-get, unit-get,
// status-set and -get, log). The relation tools are refused: an action
// runs beside the agent's loop, whose record of the relations it must not
// read.
type actionContext struct {
	a       *Agent
	id      int64
	attempt int64
	params  []byte
	out     *taskLog
	// config is the service's configuration as the agent saw it when the
	// task started.
	config map[string]*pb.ConfigValue

	mu      sync.Mutex
	results map[string]any // nested, for the bound
	flat    map[string]string
	failed  string
}

func newActionContext(a *Agent, id int64, st *pb.StartTaskResponse, out *taskLog, config map[string]*pb.ConfigValue) *actionContext {
	return &actionContext{a: a, id: id, attempt: st.Attempt, params: st.ParamsJson, out: out, config: config, flat: map[string]string{}}
}

// outcome returns the results set and action-fail's message, if any.
func (ac *actionContext) outcome() (map[string]string, string) {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	return maps.Clone(ac.flat), ac.failed
}

var errNoRelations = errors.New("relation tools are not available in actions")

func (ac *actionContext) UnitName() string { return ac.a.cfg.Unit }

func (ac *actionContext) RelationIDs(context.Context, string) ([]string, error) {
	return nil, errNoRelations
}

func (ac *actionContext) RelationGet(context.Context, string, string) (map[string]string, error) {
	return nil, errNoRelations
}

func (ac *actionContext) RelationSet(context.Context, string, map[string]string, []string) error {
	return errNoRelations
}

func (ac *actionContext) RelationList(context.Context, string) ([]string, error) {
	return nil, errNoRelations
}

func (ac *actionContext) Config(context.Context) (map[string]*pb.ConfigValue, error) {
	return ac.config, nil
}

func (ac *actionContext) UnitAddress(_ context.Context, kind string) (string, error) {
	switch kind {
	case "private-address", "public-address":
		return ac.a.cfg.Address, nil
	}
	return "", fmt.Errorf("unknown setting %q: want private-address or public-address", kind)
}

func (ac *actionContext) SetWorkloadStatus(ctx context.Context, st, message string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := ac.a.cfg.API.SetUnitStatus(ctx, &pb.SetUnitStatusRequest{
		Unit: ac.a.cfg.Unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD,
		Status: &pb.Status{Status: st, Message: message},
	})
	if err != nil {
		return fmt.Errorf("set status: %w", err)
	}
	ac.a.workload.Store(&pb.Status{Status: st, Message: message})
	return nil
}

func (ac *actionContext) WorkloadStatus(context.Context) (string, string, error) {
	if st := ac.a.workload.Load(); st != nil {
		return st.Status, st.Message, nil
	}
	return "unknown", "", nil
}

func (ac *actionContext) Log(level, message string) {
	ac.a.logger.Info(message, "operation", ac.id, "level", level)
}

func (ac *actionContext) ActionParams(context.Context) (map[string]any, error) {
	params := map[string]any{}
	if len(ac.params) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(ac.params)))
		dec.UseNumber()
		if err := dec.Decode(&params); err != nil {
			return nil, fmt.Errorf("the action's parameters: %w", err)
		}
	}
	return params, nil
}

func (ac *actionContext) SetActionResults(_ context.Context, results map[string]string) error {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	args := make([]string, 0, len(results))
	for k, v := range results {
		args = append(args, k+"="+v)
	}
	next, err := charm.SetActionResults(ac.results, args)
	if err != nil {
		return err
	}
	ac.results = next
	maps.Copy(ac.flat, results)
	return nil
}

func (ac *actionContext) FailAction(_ context.Context, message string) error {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	ac.failed = message
	return nil
}

func (ac *actionContext) ActionLog(_ context.Context, message string) error {
	ac.out.line(message)
	return nil
}

func (ac *actionContext) Checkpoint(ctx context.Context) (map[string]string, error) {
	var resp *pb.GetCheckpointResponse
	err := untilAnswered(ctx, func(ctx context.Context) (err error) {
		resp, err = ac.a.cfg.API.GetCheckpoint(ctx, &pb.GetCheckpointRequest{Operation: ac.id, Unit: ac.a.cfg.Unit})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint: %w", err)
	}
	return resp.Values, nil
}

func (ac *actionContext) SetCheckpoint(ctx context.Context, values map[string]string) error {
	err := untilAnswered(ctx, func(ctx context.Context) error {
		_, err := ac.a.cfg.API.SetCheckpoint(ctx, &pb.SetCheckpointRequest{Operation: ac.id, Unit: ac.a.cfg.Unit, Attempt: ac.attempt, Values: values})
		return err
	})
	if err != nil {
		return fmt.Errorf("store the checkpoint: %w", err)
	}
	return nil
}

// toolCallBound bounds how long an action's tool call waits for the
// controller to answer: through a controller's restart or a failover, a
// checkpoint-set waits rather than fail the action.
const toolCallBound = 5 * time.Minute

// untilAnswered makes call, each try within 30 s, until the controller
// answers it or refuses it for good (final), pausing between tries (1 s,
// doubling to 5 s), for at most toolCallBound or until ctx ends.
func untilAnswered(ctx context.Context, call func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, toolCallBound)
	defer cancel()
	for wait := time.Second; ; wait = min(2*wait, 5*time.Second) {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		err := call(cctx)
		ccancel()
		if err == nil || final(err) || !pause.For(ctx, wait) {
			return err
		}
	}
}

// taskLog buffers a task's log lines and appends them to the
// controller's record in chunks of whole lines, at most once every
// logFlushEvery, and what is left when closed.
type taskLog struct {
	ctx     context.Context
	a       *Agent
	id      int64
	attempt int64

	mu   sync.Mutex
	buf  []byte
	done chan struct{}
	quit chan struct{}
}

// maxLogBuffer bounds what a task's log holds unsent: past it, lines are
// dropped (the controller keeps the last 1 MiB anyway).
const maxLogBuffer = 4 << 20

func newTaskLog(ctx context.Context, a *Agent, id, attempt int64) *taskLog {
	l := &taskLog{ctx: ctx, a: a, id: id, attempt: attempt, done: make(chan struct{}), quit: make(chan struct{})}
	go l.run()
	return l
}

func (l *taskLog) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf)+len(s)+1 > maxLogBuffer {
		return
	}
	if len(s) >= maxLogChunk {
		s = s[:maxLogChunk-1]
	}
	l.buf = append(append(l.buf, s...), '\n')
}

// run sends the buffered lines once every logFlushEvery until closed,
// then what is left.
func (l *taskLog) run() {
	defer close(l.done)
	t := time.NewTicker(logFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.flush(false)
		case <-l.quit:
			l.flush(true)
			return
		}
	}
}

// flush sends one chunk, or, with all, every chunk buffered.
func (l *taskLog) flush(all bool) {
	for {
		l.mu.Lock()
		chunk := l.buf
		if len(chunk) > maxLogChunk {
			chunk = chunk[:maxLogChunk]
			if i := strings.LastIndexByte(string(chunk), '\n'); i >= 0 {
				chunk = chunk[:i+1]
			}
		}
		l.mu.Unlock()
		if len(chunk) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
		_, err := l.a.cfg.API.AppendTaskLog(ctx, &pb.AppendTaskLogRequest{Operation: l.id, Unit: l.a.cfg.Unit, Attempt: l.attempt, Chunk: chunk})
		cancel()
		if err != nil {
			l.a.logger.Warn("cannot append to the task's log", "operation", l.id, "error", err)
			if final(err) {
				l.mu.Lock()
				l.buf = l.buf[len(chunk):]
				l.mu.Unlock()
			}
			return
		}
		l.mu.Lock()
		l.buf = l.buf[len(chunk):]
		l.mu.Unlock()
		if !all {
			return
		}
	}
}

// close sends what is left and stops.
func (l *taskLog) close() {
	close(l.quit)
	<-l.done
}

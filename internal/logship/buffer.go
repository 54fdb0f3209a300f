package logship

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The bounds of a Buffer: about a minute of a busy machine's lines.
const (
	DefaultBufferLines = 2000
	DefaultBufferBytes = 1 << 20
	// MaxLineBytes bounds one line's message and fields: longer ones are
	// cut.
	MaxLineBytes = 16 << 10
)

// Buffer is an hclog.SinkAdapter that keeps the newest lines of a
// machine agent's logger and its units' (register it on the process's
// InterceptLogger). A line with a "unit" field is that unit's; the others
// are the machine's.
type Buffer struct {
	machine  string
	level    hclog.Level
	maxLines int
	maxBytes int

	mu      sync.Mutex
	lines   []*pb.LogLine // oldest first
	bytes   int
	dropped int64
	// ready is signalled (without blocking) when a line arrives.
	ready chan struct{}
	// shippedTotal and droppedTotal count the lines the controller took
	// and those lost on the way, since the start (the metrics).
	shippedTotal, droppedTotal atomic.Int64
}

// NewBuffer makes a Buffer for machine's lines at level and above, holding
// at most maxLines lines and maxBytes bytes (the defaults when zero).
func NewBuffer(machine string, level hclog.Level, maxLines, maxBytes int) *Buffer {
	if maxLines <= 0 {
		maxLines = DefaultBufferLines
	}
	if maxBytes <= 0 {
		maxBytes = DefaultBufferBytes
	}
	return &Buffer{machine: machine, level: level, maxLines: maxLines, maxBytes: maxBytes, ready: make(chan struct{}, 1)}
}

// Accept keeps one line, dropping the oldest kept lines beyond the bounds.
func (b *Buffer) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < b.level || level == hclog.Off {
		return
	}
	l := Line("machine-"+b.machine, name, level, time.Now(), msg, args...)
	n := Size(l)
	b.mu.Lock()
	b.lines = append(b.lines, l)
	b.bytes += n
	for len(b.lines) > b.maxLines || b.bytes > b.maxBytes {
		b.bytes -= Size(b.lines[0])
		b.lines[0] = nil
		b.lines = b.lines[1:]
		b.dropped++
		b.droppedTotal.Add(1)
	}
	b.mu.Unlock()
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// take removes and returns the oldest lines, at most maxLines of them and
// about maxBytes, and the count of lines dropped before them.
func (b *Buffer) take(maxLines, maxBytes int) ([]*pb.LogLine, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, size := 0, 0
	for n < len(b.lines) && n < maxLines {
		s := Size(b.lines[n])
		if n > 0 && size+s > maxBytes {
			break
		}
		size += s
		n++
	}
	out := make([]*pb.LogLine, n)
	copy(out, b.lines)
	clear(b.lines[:n])
	b.lines = b.lines[n:]
	if len(b.lines) == 0 {
		b.lines = nil // let the backing array go
	}
	b.bytes -= size
	d := b.dropped
	b.dropped = 0
	return out, d
}

// lost counts n lines dropped after they were taken (a failed call).
func (b *Buffer) lost(n int64) {
	b.mu.Lock()
	b.dropped += n
	b.mu.Unlock()
	b.droppedTotal.Add(n)
}

// shipped counts n lines the controller took.
func (b *Buffer) shipped(n int) { b.shippedTotal.Add(int64(n)) }

// Metrics returns the counters of the lines shipped and of those dropped
// (the buffer full, or a call failed), for the agent's metrics registry.
func (b *Buffer) Metrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "log_lines_shipped_total",
			Help: "Log lines the controller took from this agent (ctl debug-log).",
		}, func() float64 { return float64(b.shippedTotal.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "lifeline", Name: "log_lines_dropped_total",
			Help: "Log lines dropped before the controller took them: the buffer was full or a call failed.",
		}, func() float64 { return float64(b.droppedTotal.Load()) }),
	}
}

// Line makes a LogLine of an hclog call. A "unit" field makes the unit
// the line's entity; otherwise it is entity's.
func Line(entity, module string, level hclog.Level, at time.Time, msg string, args ...any) *pb.LogLine {
	l := &pb.LogLine{Entity: entity, Level: LevelName(level), Time: at.UnixNano(), Module: module, Message: cut(msg)}
	budget := MaxLineBytes - len(l.Message)
	for i := 0; i < len(args); i += 2 {
		k := fmt.Sprint(args[i])
		var v string
		if i+1 < len(args) {
			v = fmt.Sprint(args[i+1])
		} else {
			k, v = "EXTRA_VALUE_AT_END", k
		}
		if k == "unit" {
			l.Entity = v
		}
		if budget -= len(k) + len(v); budget < 0 {
			break
		}
		l.Fields = append(l.Fields, &pb.LogField{Key: k, Value: v})
	}
	return l
}

func cut(s string) string {
	if len(s) > MaxLineBytes {
		return s[:MaxLineBytes]
	}
	return s
}

// Size is about what a line takes in memory and on the wire.
func Size(l *pb.LogLine) int {
	n := 64 + len(l.Entity) + len(l.Machine) + len(l.Level) + len(l.Module) + len(l.Message)
	for _, f := range l.Fields {
		n += 16 + len(f.Key) + len(f.Value)
	}
	return n
}

// LevelName is level as LogLine names it.
func LevelName(level hclog.Level) string {
	switch level {
	case hclog.Trace:
		return "trace"
	case hclog.Debug:
		return "debug"
	case hclog.Warn:
		return "warn"
	case hclog.Error:
		return "error"
	}
	return "info"
}

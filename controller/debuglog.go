package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/logship"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The bounds of DebugLog and ShipLogs.
const (
	maxDebugLogFollows        = 32
	maxDebugLogFollowsPerUser = 4
	// maxDebugLogFilters bounds a request's include and exclude lists.
	maxDebugLogFilters = 100
	// debugLogPage is how many lines one response carries at most.
	debugLogPage = 500
	// defaultDebugLogLines is how many lines DebugLog sends first when
	// the request names neither replay nor lines.
	defaultDebugLogLines = 10
	// maxShipLines bounds one ShipLogs call, and maxShipFields a line's
	// fields.
	maxShipLines  = 1000
	maxShipFields = 64
	// maxShipUnits bounds the units whose lines one call carries (each
	// may cost a read).
	maxShipUnits = 256
)

// ShipLogs keeps a machine agent's log lines in the controller's ring,
// under the machine's share of it. Only a machine's credential may ship,
// and only lines of itself or of its units: another unit's are dropped
// with a note (the ring records which machine shipped each line, which a
// machine filter matches).
func (a *agentServer) ShipLogs(ctx context.Context, req *pb.ShipLogsRequest) (*pb.ShipLogsResponse, error) {
	c := callerFrom(ctx)
	if c.kind != names.KindMachine {
		return nil, denied("%s may not ship log lines: only a machine's agent does", c)
	}
	if len(req.GetLines()) > maxShipLines {
		return nil, invalid("%d log lines in one call: at most %d", len(req.GetLines()), maxShipLines)
	}
	self := names.MachineTag(c.id)
	units := map[string]bool{}
	for i, l := range req.GetLines() {
		if err := checkShippedLine(l, self); err != nil {
			return nil, invalid("log line %d: %v", i, err)
		}
		l.Machine = c.id
		if l.GetEntity() != self {
			units[l.GetEntity()] = true
		}
	}
	if len(units) > maxShipUnits {
		return nil, invalid("log lines of %d units in one call: at most %d", len(units), maxShipUnits)
	}
	// A machine's agent speaks for its own units only: another unit's
	// lines are dropped, and said so.
	for u := range units {
		on, err := a.s.shipUnits.onMachine(ctx, a.s.st, u, c.id)
		if err != nil {
			return nil, readErr(err, "read unit %s", u)
		}
		units[u] = on
	}
	lines := make([]*pb.LogLine, 0, len(req.GetLines())+2)
	foreign := 0
	for _, l := range req.GetLines() {
		if l.GetEntity() != self && !units[l.GetEntity()] {
			foreign++
			continue
		}
		lines = append(lines, l)
	}
	now := time.Now().UnixNano()
	if foreign > 0 {
		lines = append([]*pb.LogLine{{Entity: self, Machine: c.id, Level: "warn", Time: now, Module: "controller",
			Message: "log lines of units not on this machine dropped", Fields: []*pb.LogField{{Key: "dropped", Value: strconv.Itoa(foreign)}}}}, lines...)
	}
	if d := req.GetDropped(); d > 0 {
		// Said where it happened, before the lines that came after.
		lines = append([]*pb.LogLine{{Entity: self, Machine: c.id, Level: "warn", Time: now, Module: "controller",
			Message: "log lines dropped by the machine agent before these", Fields: []*pb.LogField{{Key: "dropped", Value: strconv.FormatInt(d, 10)}}}}, lines...)
	}
	a.s.logs.add(self, lines...)
	return &pb.ShipLogsResponse{}, nil
}

// shipUnitsTTL is how long a unit's machine is remembered for ShipLogs,
// and maxShipUnitsKnown how many are: the check costs a read a unit a
// minute, and a unit moved away (or removed) ships for a minute at most.
const (
	shipUnitsTTL      = time.Minute
	maxShipUnitsKnown = 100000
)

// shipUnits remembers which machine each unit that shipped log lines is
// on.
type shipUnits struct {
	mu    sync.Mutex
	known map[string]shipUnit
}

type shipUnit struct {
	machine string
	read    time.Time
}

// onMachine says whether unit is on machine, from memory when read less
// than shipUnitsTTL ago.
func (s *shipUnits) onMachine(ctx context.Context, st *state.State, unit, machine string) (bool, error) {
	s.mu.Lock()
	k, ok := s.known[unit]
	s.mu.Unlock()
	if ok && time.Since(k.read) < shipUnitsTTL {
		return k.machine == machine, nil
	}
	u, err := st.Unit(ctx, unit)
	if errors.Is(err, state.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known == nil || len(s.known) >= maxShipUnitsKnown {
		s.known = map[string]shipUnit{} // forget all: they are read again
	}
	s.known[unit] = shipUnit{machine: u.GetMachineId(), read: time.Now()}
	return u.GetMachineId() == machine, nil
}

func checkShippedLine(l *pb.LogLine, self string) error {
	switch {
	case l.GetEntity() != self && !names.ValidUnit(l.GetEntity()):
		return fmt.Errorf("entity %q: want %s or a unit", l.GetEntity(), self)
	case hclog.LevelFromString(l.GetLevel()) == hclog.NoLevel || l.GetLevel() != strings.ToLower(l.GetLevel()):
		return fmt.Errorf("level %q: want trace, debug, info, warn or error", l.GetLevel())
	case len(l.GetFields()) > maxShipFields:
		return fmt.Errorf("%d fields: at most %d", len(l.GetFields()), maxShipFields)
	case logship.Size(l) > 2*logship.MaxLineBytes:
		return fmt.Errorf("%d bytes: at most %d", logship.Size(l), 2*logship.MaxLineBytes)
	}
	return nil
}

// LogSink returns the sink that keeps the controller's own log lines (at
// level and above) in its ring, for main to register on the process's
// logger.
func (s *Server) LogSink(level hclog.Level) hclog.SinkAdapter {
	return &controllerSink{ring: s.logs, entity: "controller-" + s.cfg.ID, level: level}
}

type controllerSink struct {
	ring   *logRing
	entity string
	level  hclog.Level
}

func (c *controllerSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < c.level || level == hclog.Off {
		return
	}
	c.ring.add("controller", logship.Line(c.entity, name, level, time.Now(), msg, args...))
}

// logFilter is what a DebugLog request keeps.
type logFilter struct {
	include, exclude []string
	level            hclog.Level
}

func newLogFilter(req *pb.DebugLogRequest) (*logFilter, error) {
	f := &logFilter{include: req.GetInclude(), exclude: req.GetExclude(), level: hclog.Info}
	if n := len(f.include) + len(f.exclude); n > maxDebugLogFilters {
		return nil, invalid("%d entities to include and exclude: at most %d", n, maxDebugLogFilters)
	}
	for _, e := range append(append([]string(nil), f.include...), f.exclude...) {
		if err := checkLogEntity(e); err != nil {
			return nil, err
		}
	}
	if lv := req.GetLevel(); lv != "" {
		f.level = hclog.LevelFromString(lv)
		if f.level == hclog.NoLevel || f.level == hclog.Off {
			return nil, invalid("level %q: want trace, debug, info, warn or error", lv)
		}
	}
	return f, nil
}

// checkLogEntity accepts what include and exclude may name.
func checkLogEntity(e string) error {
	if e == "controller" || names.ValidUnit(e) || names.ValidService(e) {
		return nil
	}
	if id, ok := strings.CutPrefix(e, names.KindMachine+"-"); ok && names.ValidMachine(id) {
		return nil
	}
	return invalid("%q is not a unit (kv/0), a service (kv), a machine (machine-3) or controller", e)
}

// keep says whether the filter lets l through.
func (f *logFilter) keep(l *pb.LogLine) bool {
	if hclog.LevelFromString(l.Level) < f.level {
		return false
	}
	for _, e := range f.exclude {
		if logMatches(e, l) {
			return false
		}
	}
	if len(f.include) == 0 {
		return true
	}
	for _, e := range f.include {
		if logMatches(e, l) {
			return true
		}
	}
	return false
}

// logMatches says whether entity e names l's: the unit itself, its
// service, the machine that shipped it, or the controllers.
func logMatches(e string, l *pb.LogLine) bool {
	switch {
	case e == "controller":
		return l.Machine == "" && strings.HasPrefix(l.Entity, "controller-")
	case strings.HasPrefix(e, names.KindMachine+"-"):
		return l.Machine != "" && e == names.MachineTag(l.Machine)
	case strings.Contains(e, "/"):
		return l.Entity == e
	}
	return names.ValidUnit(l.Entity) && names.UnitService(l.Entity) == e
}

// DebugLog sends the lines the ring keeps that the request's filters let
// through: all of them (replay) or the last ones, then, with follow, the
// new ones as they arrive. A stream that reads slower than lines arrive
// is told how many it missed; it never holds up the agents.
func (s *Server) DebugLog(req *pb.DebugLogRequest, stream pb.OperatorService_DebugLogServer) error {
	ctx := stream.Context()
	f, err := newLogFilter(req)
	if err != nil {
		return err
	}
	n := req.GetLines()
	switch {
	case n < 0:
		return invalid("lines %d: want 0 or more", n)
	case n > 0 && req.GetReplay():
		return invalid("replay sends every line kept: lines %d too is one too many", n)
	case n == 0:
		n = defaultDebugLogLines
	}
	if req.GetFollow() {
		user := callerFrom(ctx).id
		if err := s.debugFollows.take(user); err != nil {
			return err
		}
		defer s.debugFollows.release(user)
	}
	var after, until uint64
	if req.GetReplay() {
		until = s.logs.newest()
	} else {
		var first []*pb.LogLine
		first, after = s.logs.last(int(min(n, int64(s.logs.lim.Lines))), f.keep)
		until = after
		for len(first) > 0 {
			page := first[:min(len(first), debugLogPage)]
			first = first[len(page):]
			if err := stream.Send(&pb.DebugLogResponse{Lines: page}); err != nil {
				return err
			}
		}
	}
	if req.GetFollow() {
		until = ^uint64(0)
	}
	// A replay starts at the oldest line kept: the lines dropped before
	// it are none that this stream missed.
	replayStart := req.GetReplay()
	for {
		lines, next, skipped, changed := s.logs.since(after, until, debugLogPage, f.keep)
		if replayStart {
			skipped, replayStart = 0, false
		}
		if len(lines) > 0 || skipped > 0 {
			if err := stream.Send(&pb.DebugLogResponse{Lines: lines, Skipped: skipped}); err != nil {
				return err
			}
		}
		moved := next != after
		after = next
		if after >= until {
			return nil
		}
		if moved || skipped > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// debugLogSummary is a DebugLog request in audit's words.
func debugLogSummary(r *pb.DebugLogRequest) string {
	s := "read the debug log"
	if len(r.Include) > 0 {
		s += " of " + listSome(r.Include, 8)
	}
	if len(r.Exclude) > 0 {
		s += " except " + listSome(r.Exclude, 8)
	}
	if r.Follow {
		s += ", following"
	}
	return s
}

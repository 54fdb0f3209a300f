package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/lifelinehq/lifeline/controller"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// modelStream is what an open model page's stream keeps between pushes:
// the model as the page last showed it, its rows as rendered, and what
// changed since, from the watch hub's events.
//
// A push sends the whole page ("model") first and after the watch
// started again, and otherwise only the rows that changed ("rows",
// writePatch). When nothing but units' statuses changed (the common
// case: agents and charms reporting), it reads only those units, through
// Status with a selection of them, and patches them into the model it
// holds, deriving their services' status again; anything else (an
// entity added, removed or changed, a relation's scope, a rollout)
// reads the whole model. Either way the reads are the session's user's
// Status calls, authorized as ever.
type modelStream struct {
	s      *Server
	se     session
	filter string

	st   *pb.ModelStatus   // the model as last read, with units patched in since
	at   map[string][2]int // a unit's place in st: its service's index and its own
	own  map[int]bool      // the services of st that are copies of the stream's own
	rows *modelRows        // the rows the page shows
	r    rowRenderer
	buf  bytes.Buffer

	// What changed since the last push: the units whose status did,
	// whether anything else did (read the whole model), and whether the
	// watch started again (send the whole page).
	units map[string]bool
	whole bool
	reset bool
	// need is the revision the next read must be at or past: that of
	// the last change noted, or the stream's start.
	need int64
}

// sharedStatus reads what req selects of the model as user, through the
// Status call, sharing the read under it with other streams' calls of
// the same (key) at revision need or past (statusReads): the answer
// must not be changed.
func (s *Server) sharedStatus(ctx context.Context, user string, req *pb.StatusRequest, key string, need int64) (*pb.StatusResponse, error) {
	resp, err := s.cfg.API.CallAs(ctx, user, "Status", req, func(ctx context.Context) (any, error) {
		return s.reads.do(ctx, key, need, func(ctx context.Context) (*pb.StatusResponse, error) { return s.cfg.API.Status(ctx, req) })
	})
	if err != nil {
		return nil, err
	}
	return resp.(*pb.StatusResponse), nil
}

func (s *Server) newModelStream(se session, filter string) *modelStream {
	return &modelStream{s: s, se: se, filter: filter, r: rowRenderer{pages: s.pages}, units: map[string]bool{}}
}

// unitStatusPrefixes are the keys of a unit's statuses: a change under
// them changes the unit's row and its service's status alone.
var unitStatusPrefixes = []string{state.StatusKey(state.StatusUnit, ""), state.StatusKey(state.StatusUnitAgent, "")}

// note records a batch of the hub's events under the model's prefixes.
func (m *modelStream) note(b state.WatchBatch) {
	if b.Reset {
		m.reset = true
	}
	m.need = max(m.need, b.Revision)
	for _, ev := range b.Events {
		if u := unitOfStatusKey(ev.Key); u != "" {
			m.units[u] = true
		} else {
			m.whole = true
		}
	}
}

// unitOfStatusKey is the unit whose status key is key, or "".
func unitOfStatusKey(key string) string {
	for _, p := range unitStatusPrefixes {
		if u, ok := strings.CutPrefix(key, p); ok {
			return u
		}
	}
	return ""
}

// push reads what changed and returns the event that shows it to the
// page: its name, its data and the revision it is of.
func (m *modelStream) push(ctx context.Context) (string, []byte, int64, error) {
	role, err := m.s.role(ctx, m.se.user)
	if err != nil {
		return "", nil, 0, err
	}
	whole := m.st == nil || m.reset || m.whole || len(m.units) > state.MaxSelectors
	if !whole {
		ok, err := m.readUnits(ctx)
		if err != nil {
			return "", nil, 0, err
		}
		whole = !ok
	}
	if whole {
		resp, err := m.s.sharedStatus(ctx, m.se.user, &pb.StatusRequest{}, "", m.need)
		if err != nil {
			return "", nil, 0, err
		}
		m.hold(resp.Status)
	}
	full := m.rows == nil || m.reset
	m.units, m.whole, m.reset = map[string]bool{}, false, false
	return m.event(role, full)
}

// event renders the model held as role sees it, and returns the event
// that brings the page to it: the whole page when full, else the rows
// that changed, when few enough.
func (m *modelStream) event(role pb.UserRole, full bool) (string, []byte, int64, error) {
	v := buildView(m.st, m.filter)
	v.User, v.CSRF, v.Role = m.se.user, m.se.csrf(), roleName(role)
	v.setCanAct(controller.Allows("Resolved", role))
	rows, err := m.r.render(v)
	if err != nil {
		return "", nil, 0, err
	}
	v.Rows = rows
	prev := m.rows
	m.rows = rows
	if !full && writePatch(&m.buf, prev, rows) {
		return "rows", m.buf.Bytes(), v.Revision, nil
	}
	m.buf.Reset()
	if err := m.s.pages.ExecuteTemplate(&m.buf, "model-body", v); err != nil {
		return "", nil, 0, err
	}
	return "model", m.buf.Bytes(), v.Revision, nil
}

// hold keeps st, a Status answer other streams may hold too, as the
// model the page shows. It is not changed: the services patch changes
// are copies of their own (own), in a list of services of its own.
func (m *modelStream) hold(st *pb.ModelStatus) {
	m.st = &pb.ModelStatus{Revision: st.GetRevision(), Services: slices.Clone(st.GetServices()), Machines: st.GetMachines(), Relations: st.GetRelations()}
	m.own = map[int]bool{}
	m.at = make(map[string][2]int, len(m.at))
	for i, svc := range m.st.Services {
		for j, u := range svc.Units {
			m.at[u.Name] = [2]int{i, j}
		}
	}
}

// ownService makes the held model's service i a copy of its own, with a
// list of units of its own, which patch may change; its other fields
// stay shared, unchanged.
func (m *modelStream) ownService(i int) *pb.ServiceStatus {
	if !m.own[i] {
		src := m.st.Services[i]
		c := &pb.ServiceStatus{}
		dst := c.ProtoReflect()
		src.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			dst.Set(fd, v)
			return true
		})
		c.Units = slices.Clone(src.Units)
		m.st.Services[i] = c
		m.own[i] = true
	}
	return m.st.Services[i]
}

// readUnits reads the units whose status changed and patches them into
// the model held, with their services' status. It reports false when it
// cannot, and the whole model must be read: a unit it does not hold, or
// one gone.
func (m *modelStream) readUnits(ctx context.Context) (bool, error) {
	if len(m.units) == 0 {
		return true, nil
	}
	names := make([]string, 0, len(m.units))
	for u := range m.units {
		if _, ok := m.at[u]; !ok {
			return false, nil
		}
		names = append(names, u)
	}
	sort.Strings(names)
	part, err := m.s.sharedStatus(ctx, m.se.user, &pb.StatusRequest{Units: names}, strings.Join(names, " "), m.need)
	if status.Code(err) == codes.NotFound {
		return false, nil // a unit removed: its removal is among the changes
	}
	if err != nil {
		return false, err
	}
	touched, ok := m.patch(part.GetStatus(), names)
	if !ok {
		return false, nil
	}
	for _, i := range touched {
		svc := m.st.Services[i]
		// The charm's status for its service speaks for it
		// (status-set --application): the one held stays, as a change
		// of it reads the whole model. Without one the service shows
		// its worst unit's, of all its units. The answer does not say
		// which (for a service held for some units' sake it shows the
		// charm's, or the worst of those units'): the status key does.
		set, err := m.s.cfg.State.Status(ctx, state.StatusService, svc.Name)
		if err != nil {
			return false, fmt.Errorf("read %s's status: %w", svc.Name, err)
		}
		if set.GetStatus() == "" {
			svc.Status, svc.Message = controller.ServiceWorkload(svc.Units)
		}
	}
	return true, nil
}

// patch puts the named units of part, a status selecting them, in place
// of those held, and returns the indexes of their services; false when
// part lacks one.
func (m *modelStream) patch(part *pb.ModelStatus, names []string) ([]int, bool) {
	found := 0
	var touched []int
	for _, svc := range part.GetServices() {
		for _, u := range svc.Units {
			if !m.units[u.Name] {
				continue // a subordinate the selection brought along
			}
			at := m.at[u.Name]
			m.ownService(at[0]).Units[at[1]] = u
			if !slices.Contains(touched, at[0]) {
				touched = append(touched, at[0])
			}
			found++
		}
	}
	m.st.Revision = max(m.st.Revision, part.GetRevision())
	return touched, found == len(names)
}

package dashboard

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func newSecret() (string, error) { return pki.NewSecret() }

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the embedded tree is the binary's own
	}
	return sub
}

var funcs = template.FuncMap{
	"join":       strings.Join,
	"lower":      strings.ToLower,
	"trimPrefix": strings.TrimPrefix,
	"stamp":      stamp,
	"opState":    state.OperationStateName,
	"opStates":   func() []string { return opStateNames },
	"auditRead":  func() int { return auditRead },
	"dict":       dict,
}

// opStateNames are the operation states the list filters by, "" for
// any.
var opStateNames = []string{"", "awaiting-approval", "approved", "running", "done", "failed", "stopped", "rejected", "expired"}

// dict makes a map of its key, value arguments, for a template that
// takes several.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, errors.New("dict: want keys and values")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, errors.New("dict: a key is not a string")
		}
		m[k] = kv[i+1]
	}
	return m, nil
}

// modelView is what the model page shows.
type modelView struct {
	User     string
	Role     string
	CanAct   bool
	CSRF     string
	Filter   string
	Revision int64
	Units    []unitRow
	Services []*pb.ServiceStatus
	Machines []*pb.MachineStatus
	Rels     []*pb.RelationStatus
	Errors   int
	// Rows are the page's rows, rendered (rowRenderer).
	Rows *modelRows
}

// setCanAct says whether the page shows the buttons, on it and its
// units' rows.
func (v *modelView) setCanAct(can bool) {
	v.CanAct = can
	for i := range v.Units {
		v.Units[i].CanAct = can
	}
}

// unitRow is a unit as its row shows it: plain fields, so that the
// template reads each by one lookup (an embedded message's fields cost
// html/template a search each, a third of a 10,000-unit render).
type unitRow struct {
	Name, Service, Life, Machine, Agent, State, Workload, Message, AgentMessage, WaitingFor string
	Error                                                                                   bool
	// CanAct says whether the row shows its Resolved button.
	CanAct bool
	// Search is what the text filter matches against.
	Search string
}

// inError says whether a unit's agent or workload reports an error.
func inError(u *pb.UnitStatus) bool {
	return u.Agent == "error" || u.Workload == "error" || strings.HasSuffix(u.State, "-error")
}

// buildView arranges a status for the page: units in error first, then
// by name; filter (case-insensitive text) keeps the rows that mention
// it.
func buildView(st *pb.ModelStatus, filter string) *modelView {
	v := &modelView{Revision: st.GetRevision(), Filter: filter, Machines: st.GetMachines(), Rels: st.GetRelations(), Services: st.GetServices()}
	f := strings.ToLower(strings.TrimSpace(filter))
	for _, svc := range st.GetServices() {
		for _, u := range svc.Units {
			r := unitRow{Name: u.Name, Service: svc.Name, Life: u.Life, Machine: u.Machine, Agent: u.Agent, State: u.State,
				Workload: u.Workload, Message: u.Message, WaitingFor: strings.Join(u.WaitingFor, ", "), Error: inError(u)}
			if u.AgentMessage != u.Message {
				r.AgentMessage = u.AgentMessage
			}
			r.Search = strings.ToLower(strings.Join([]string{u.Name, u.Life, u.Machine, u.Agent, u.State, u.Workload, u.Message, r.AgentMessage, r.WaitingFor}, " "))
			if f != "" && !strings.Contains(r.Search, f) {
				continue
			}
			if r.Error {
				v.Errors++
			}
			v.Units = append(v.Units, r)
		}
	}
	sort.SliceStable(v.Units, func(i, j int) bool {
		a, b := v.Units[i], v.Units[j]
		if a.Error != b.Error {
			return a.Error
		}
		return unitLess(a.Name, b.Name)
	})
	if f != "" {
		v.Machines = filterSlice(v.Machines, f, func(m *pb.MachineStatus) string {
			return strings.Join([]string{m.Id, m.Life, m.Agent, m.Message, m.Address, strings.Join(m.Units, " ")}, " ")
		})
		v.Services = filterSlice(v.Services, f, func(s *pb.ServiceStatus) string {
			return strings.Join([]string{s.Name, s.Charm, s.Life, s.Status, s.Message}, " ")
		})
		v.Rels = filterSlice(v.Rels, f, func(r *pb.RelationStatus) string { return r.Key + " " + r.Life })
	}
	return v
}

func filterSlice[T any](in []T, f string, text func(T) string) []T {
	var out []T
	for _, x := range in {
		if strings.Contains(strings.ToLower(text(x)), f) {
			out = append(out, x)
		}
	}
	return out
}

// unitLess orders unit names by service, then by number.
func unitLess(a, b string) bool {
	as, an, _ := strings.Cut(a, "/")
	bs, bn, _ := strings.Cut(b, "/")
	if as != bs {
		return as < bs
	}
	if len(an) != len(bn) {
		return len(an) < len(bn)
	}
	return an < bn
}

// renderModel renders the model's tables (the page's live part) into a
// buffer, their rows by r, and sets v.Rows.
func (s *Server) renderModel(r *rowRenderer, v *modelView) (*bytes.Buffer, error) {
	rows, err := r.render(v)
	if err != nil {
		return nil, err
	}
	v.Rows = rows
	var b bytes.Buffer
	err = s.pages.ExecuteTemplate(&b, "model-body", v)
	return &b, err
}

// status reads the model as user, through the Status call.
func (s *Server) status(ctx context.Context, user string) (*pb.StatusResponse, error) {
	req := &pb.StatusRequest{}
	resp, err := s.cfg.API.CallAs(ctx, user, "Status", req, func(ctx context.Context) (any, error) { return s.cfg.API.Status(ctx, req) })
	if err != nil {
		return nil, err
	}
	return resp.(*pb.StatusResponse), nil
}

// role reads user's role, through the WhoAmI call.
func (s *Server) role(ctx context.Context, user string) (pb.UserRole, error) {
	req := &pb.WhoAmIRequest{}
	resp, err := s.cfg.API.CallAs(ctx, user, "WhoAmI", req, func(ctx context.Context) (any, error) { return s.cfg.API.WhoAmI(ctx, req) })
	if err != nil {
		return 0, err
	}
	return resp.(*pb.WhoAmIResponse).GetUser().GetRole(), nil
}

// view builds the page's view for se's user.
func (s *Server) view(ctx context.Context, se session, filter string) (*modelView, error) {
	role, err := s.role(ctx, se.user)
	if err != nil {
		return nil, err
	}
	st, err := s.status(ctx, se.user)
	if err != nil {
		return nil, err
	}
	v := buildView(st.Status, filter)
	v.User, v.CSRF = se.user, se.csrf()
	v.Role = roleName(role)
	// The buttons show when the call would be allowed; it is authorized
	// anyway when made.
	v.setCanAct(controller.Allows("Resolved", role))
	return v, nil
}

func (s *Server) modelPage(w http.ResponseWriter, r *http.Request, se session) {
	start := time.Now()
	v, err := s.view(r.Context(), se, r.URL.Query().Get("q"))
	if err != nil {
		httpError(w, err)
		return
	}
	if v.Rows, err = (&rowRenderer{pages: s.pages}).render(v); err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "model.html", v)
	s.logger.Debug("model page", "user", se.user, "units", len(v.Units), "took", time.Since(start))
}

package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// auditPrefixes and controllerPrefixes are the keys the audit and the
// controllers pages follow.
var (
	auditPrefixes      = []string{"audit/"}
	controllerPrefixes = []string{"controllers/", "leader/"}
)

// The audit page shows the newest auditRead entries matching its
// filters: the Audit call filters, by user, verb (the RPC), entity and
// since, over as much of the log as its scan looks at.
const auditRead = 1000

// auditView is what the audit page shows.
type auditView struct {
	User, Role, CSRF string
	Filter           auditFilter
	Query            string
	Entries          []auditRow
	Truncated        bool
}

type auditFilter struct {
	User, Verb, Entity, Since string
}

type auditRow struct {
	When, User, Verb, Targets, Summary, Result, Message, Controller string
	Seq                                                             int64
	Changed, Refused, Pending                                       bool
}

// parseAuditFilter reads the page's filters: since is a duration ago
// ("1h") or an RFC 3339 time.
func parseAuditFilter(q url.Values, now time.Time) (auditFilter, *pb.AuditRequest, error) {
	f := auditFilter{User: strings.TrimSpace(q.Get("user")), Verb: strings.TrimSpace(q.Get("verb")),
		Entity: strings.TrimSpace(q.Get("entity")), Since: strings.TrimSpace(q.Get("since"))}
	req := &pb.AuditRequest{User: f.User, Rpc: f.Verb, Entity: f.Entity, Limit: auditRead}
	if f.User != "" && !names.ValidUser(f.User) {
		return f, nil, invalidf("user %q: not a user's name", f.User)
	}
	if len(f.Verb) > 64 {
		return f, nil, invalidf("verb of %d bytes: at most 64", len(f.Verb))
	}
	if f.Since != "" {
		if d, err := time.ParseDuration(f.Since); err == nil && d > 0 {
			req.SinceUnixNano = now.Add(-d).UnixNano()
		} else if t, err := time.Parse(time.RFC3339, f.Since); err == nil {
			req.SinceUnixNano = t.UnixNano()
		} else {
			return f, nil, invalidf("since %q: want a duration ago (1h) or a time (2026-12-03T04:00:00Z)", f.Since)
		}
	}
	return f, req, nil
}

func (s *Server) auditView(ctx context.Context, se session, q url.Values) (*auditView, error) {
	role, err := s.role(ctx, se.user)
	if err != nil {
		return nil, err
	}
	f, req, err := parseAuditFilter(q, time.Now())
	if err != nil {
		return nil, err
	}
	v := &auditView{User: se.user, Role: roleName(role), CSRF: se.csrf(), Filter: f, Query: q.Encode()}
	var entries []*pb.AuditEntry
	err = collect(ctx, s, se.user, "Audit", req, s.cfg.API.Audit, func(m *pb.AuditResponse) {
		entries = append(entries, m.Entries...)
		v.Truncated = v.Truncated || m.Truncated
	})
	if err != nil {
		return nil, err
	}
	for i := len(entries) - 1; i >= 0; i-- { // newest first
		e := entries[i]
		row := auditRow{Seq: e.Seq, When: stamp(e.UnixNano), User: e.User, Verb: e.Rpc, Targets: strings.Join(e.Targets, ", "),
			Summary: e.Summary, Message: e.Message, Controller: e.Controller, Changed: e.Changed, Pending: e.Pending}
		switch {
		case e.Pending:
			row.Result = "pending"
		case e.Code == 0:
			row.Result = "ok"
		default:
			row.Result = codes.Code(e.Code).String()
			row.Refused = true
		}
		v.Entries = append(v.Entries, row)
	}
	return v, nil
}

func (s *Server) auditPage(w http.ResponseWriter, r *http.Request, se session) {
	v, err := s.auditView(r.Context(), se, r.URL.Query())
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "audit.html", v)
}

// controllersView is what the controllers page shows: the controllers
// ctl status lists, and which one leads, read without the model
// (StatusRequest.ControllersOnly).
type controllersView struct {
	User, Role, CSRF string
	Controllers      []*pb.ControllerStatus
	Leader           string
	Alarms           []string
	Ops              *pb.OperationsStatus
}

func (s *Server) controllersView(ctx context.Context, se session) (*controllersView, error) {
	role, err := s.role(ctx, se.user)
	if err != nil {
		return nil, err
	}
	st, err := call(ctx, s, se.user, "Status", &pb.StatusRequest{ControllersOnly: true}, s.cfg.API.Status)
	if err != nil {
		return nil, err
	}
	v := &controllersView{User: se.user, Role: roleName(role), CSRF: se.csrf(), Controllers: st.GetStatus().GetControllers(),
		Alarms: st.GetStatus().GetAlarms(), Ops: st.GetStatus().GetOperations()}
	for _, c := range v.Controllers {
		if c.Leader {
			v.Leader = c.Id
		}
	}
	return v, nil
}

func (s *Server) controllersPage(w http.ResponseWriter, r *http.Request, se session) {
	v, err := s.controllersView(r.Context(), se)
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "controllers.html", v)
}

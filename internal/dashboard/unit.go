package dashboard

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/controller"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// unitPrefixes are the keys a unit page shows, besides the model's: its
// status history, relation settings and host report.
var unitPrefixes = append(append([]string{}, modelPrefixes...), "status-history/", "settings/", "host-reports/")

// unitView is what a unit page shows.
type unitView struct {
	User, Role, CSRF string
	CanAct           bool
	Unit             *pb.UnitDetail
	Error            bool
	History          []historyRow
	Relations        []relationView
}

type historyRow struct {
	When, Kind, Status, Message, Output string
}

type relationView struct {
	*pb.UnitRelation
	Settings []kv
	Related  []relatedView
}

type relatedView struct {
	Unit     string
	Settings []kv
}

type kv struct{ Key, Value string }

func sortedKV(m map[string]string) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// unitView reads unit as se's user, through the ShowUnit call.
func (s *Server) unitView(ctx context.Context, se session, unit string) (*unitView, error) {
	role, err := s.role(ctx, se.user)
	if err != nil {
		return nil, err
	}
	req := &pb.ShowUnitRequest{Unit: unit}
	resp, err := s.cfg.API.CallAs(ctx, se.user, "ShowUnit", req, func(ctx context.Context) (any, error) { return s.cfg.API.ShowUnit(ctx, req) })
	if err != nil {
		return nil, err
	}
	u := resp.(*pb.ShowUnitResponse).GetUnit()
	v := &unitView{User: se.user, Role: roleName(role), CSRF: se.csrf(), CanAct: controller.Allows("Resolved", role), Unit: u,
		Error: u.GetAgent().GetStatus() == "error" || u.GetWorkload().GetStatus() == "error"}
	for i := len(u.History) - 1; i >= 0; i-- { // newest first
		h := u.History[i]
		v.History = append(v.History, historyRow{When: stamp(h.SinceUnixNano), Kind: h.Kind, Status: h.Status, Message: h.Message, Output: h.Data["output"]})
	}
	for _, r := range u.Relations {
		rv := relationView{UnitRelation: r, Settings: sortedKV(r.Settings)}
		for _, ru := range r.RelatedUnits {
			rv.Related = append(rv.Related, relatedView{Unit: ru.Unit, Settings: sortedKV(ru.Settings)})
		}
		v.Relations = append(v.Relations, rv)
	}
	return v, nil
}

func roleName(r pb.UserRole) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "USER_ROLE_"))
}

// stamp is a time as the pages show it, UTC to the second.
func stamp(unixNano int64) string {
	if unixNano == 0 {
		return ""
	}
	return time.Unix(0, unixNano).UTC().Format("2006-01-02 15:04:05")
}

func (s *Server) unitPage(w http.ResponseWriter, r *http.Request, se session) {
	v, err := s.unitView(r.Context(), se, r.PathValue("service")+"/"+r.PathValue("n"))
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, "unit.html", v)
}

package controller_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestDashboardLoginMakesALinkThatWorksOnce(t *testing.T) {
	e := newEnvWith(t, controllertest.Options{DashboardURL: "https://ctl.example:17072"})
	vic := pb.NewOperatorServiceClient(e.dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)))
	resp, err := vic.DashboardLogin(e.ctx, &pb.DashboardLoginRequest{})
	if err != nil {
		t.Fatalf("DashboardLogin = %v", err)
	}
	u, err := url.Parse(resp.LoginUrl)
	if err != nil || resp.Url != "https://ctl.example:17072" || !strings.HasPrefix(resp.LoginUrl, resp.Url+"/login?") || u.Query().Get("user") != "vic" {
		t.Fatalf("DashboardLogin = %v, want a link to the dashboard for vic", resp)
	}
	tok := u.Query().Get("token")
	sess := controller.DashboardDigest("session")
	if _, err := e.st.UseDashboardLogin(e.ctx, "vic", controller.DashboardDigest(tok), sess, time.Now(), state.MaxDashboardSessionTTL); err != nil {
		t.Fatalf("UseDashboardLogin = %v", err)
	}
	if _, err := e.st.UseDashboardLogin(e.ctx, "vic", controller.DashboardDigest(tok), sess, time.Now(), state.MaxDashboardSessionTTL); status.Code(toStatusErr(err)) != codes.NotFound {
		t.Errorf("UseDashboardLogin again = %v, want NotFound", err)
	}

	none := newEnv(t)
	_, err = none.admin().DashboardLogin(none.ctx, &pb.DashboardLoginRequest{})
	wantCode(t, "DashboardLogin without a dashboard", err, codes.FailedPrecondition, "this controller serves no dashboard")
}

// TestCallAsAuthorizesAndAuditsLikeTheRPC makes Resolved through CallAs as
// a viewer (refused, audited) and as an operator (audited as the change).
func TestCallAsAuthorizesAndAuditsLikeTheRPC(t *testing.T) {
	e := newEnvWith(t, controllertest.Options{})
	e.User("vic", pb.UserRole_USER_ROLE_VIEWER)
	e.User("olga", pb.UserRole_USER_ROLE_OPERATOR)
	srv := e.Server()
	req := &pb.ResolvedRequest{Unit: "nope/0"}
	call := func(ctx context.Context) (any, error) { return srv.Resolved(ctx, req) }
	_, err := srv.CallAs(e.ctx, "vic", "Resolved", req, call)
	wantCode(t, "CallAs(vic, Resolved)", err, codes.PermissionDenied, "user vic (viewer) may not call Resolved: it needs the operator role")
	_, err = srv.CallAs(e.ctx, "olga", "Resolved", req, call)
	if c := status.Code(err); c == codes.PermissionDenied || c == codes.OK {
		t.Errorf("CallAs(olga, Resolved of a missing unit) = %v, want a refusal other than PermissionDenied", err)
	}
	_, err = srv.CallAs(e.ctx, "ghost", "Resolved", req, call)
	wantCode(t, "CallAs(ghost)", err, codes.Unauthenticated, "user ghost does not exist")
	entries, _, err := e.st.AuditAfter(e.ctx, 0, 100)
	if err != nil {
		t.Fatalf("AuditLog = %v", err)
	}
	var users []string
	for _, en := range entries {
		if en.Rpc == "Resolved" {
			users = append(users, en.User)
		}
	}
	if strings.Join(users, " ") != "vic olga" {
		t.Errorf("audited Resolved calls by %v, want vic then olga", users)
	}
}

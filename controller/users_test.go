package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// callMethod calls OperatorService's method with an empty request, as
// whatever its kind is, and returns its status code: what authorization
// decides does not depend on the request.
func callMethod(ctx context.Context, conn *grpc.ClientConn, method string, clientStream, serverStream bool) codes.Code {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := "/lifeline.v1.OperatorService/" + method
	if !clientStream && !serverStream {
		return status.Code(conn.Invoke(ctx, full, &emptypb.Empty{}, &emptypb.Empty{}))
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: clientStream, ServerStreams: serverStream}, full)
	if err != nil {
		return status.Code(err)
	}
	if !clientStream {
		if err := s.SendMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
			return status.Code(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		return status.Code(err)
	}
	// The first answer, or the end: a watch goes on after its first.
	if err := s.RecvMsg(&emptypb.Empty{}); err != nil && !errors.Is(err, io.EOF) {
		return status.Code(err)
	}
	return codes.OK
}

// rank orders the roles: each may do what those below it may.
var rank = map[string]int{"viewer": 1, "operator": 2, "admin": 3}

// Each role against every OperatorService method: a call is
// PermissionDenied exactly when the role is below the method's. The
// methods are OperatorService's own list, so a method added later is in
// the table; its row is what TestEveryOperatorMethodHasARole checks.
// Every refusal is in the audit log, naming its user.
func TestEachRoleAgainstEveryOperatorMethod(t *testing.T) {
	e := newEnv(t)
	need := map[string]string{
		"Status": "viewer", "WatchStatus": "viewer", "GetConfig": "viewer", "ShowStatusLog": "viewer",
		"ShowUnit": "viewer", "ShowMachine": "viewer",
		"Audit": "viewer", "WhoAmI": "viewer", "RotateCredential": "viewer", "Barrier": "viewer", "Version": "viewer",
		"UploadCharm": "operator", "Deploy": "operator", "AddUnits": "operator", "AddMachines": "operator",
		"AddRelation": "operator", "DestroyRelation": "operator", "DestroyUnit": "operator",
		"DestroyMachine": "operator", "DestroyMachines": "operator", "DestroyService": "operator",
		"Resolved": "operator", "SetConfig": "operator", "IssueJoinToken": "operator",
		"ListUsers": "admin", "AddUser": "admin", "RemoveUser": "admin", "SetUserRole": "admin", "AddController": "admin",
		"ListActions": "viewer", "ListOperations": "viewer", "ShowOperation": "viewer", "ShowTask": "viewer",
		"RunAction": "operator", "ApproveOperation": "operator", "RejectOperation": "operator", "ExecuteOperation": "operator",
		"PauseTasks": "operator", "ResumeTasks": "operator", "StopTasks": "operator",
		// The operations' task logs.
		"TaskLogs": "viewer",
		// The daemons' log lines.
		"DebugLog": "viewer",
		// Revisions.
		"ListRevisions": "viewer", "ShowRevision": "viewer", "RollbackService": "operator", "RefreshService": "operator",
		// Rollouts.
		"GetRolloutPolicy": "viewer", "RolloutStatus": "viewer", "SetRolloutPolicy": "operator",
		"PauseRollout": "operator", "ResumeRollout": "operator", "PromoteRollout": "operator", "AbortRollout": "operator",
		// The dashboard's login links.
		"DashboardLogin": "viewer",
		// Manifests.
		"ClaimOwnership": "operator",
	}
	conns := map[string]*grpc.ClientConn{
		"viewer":   e.Dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)),
		"operator": e.Dial(e.User("olga", pb.UserRole_USER_ROLE_OPERATOR)),
		"admin":    e.Dial(e.User("ada", pb.UserRole_USER_ROLE_ADMIN)),
	}
	userOf := map[string]string{"viewer": "vic", "operator": "olga", "admin": "ada"}
	type method struct {
		name                       string
		clientStream, serverStream bool
	}
	var methods []method
	for _, m := range pb.OperatorService_ServiceDesc.Methods {
		methods = append(methods, method{name: m.MethodName})
	}
	for _, s := range pb.OperatorService_ServiceDesc.Streams {
		methods = append(methods, method{s.StreamName, s.ClientStreams, s.ServerStreams})
	}
	deniedBy := map[string]int{}
	for _, m := range methods {
		role, ok := need[m.name]
		if !ok {
			t.Errorf("OperatorService.%s has no row in this test's table: add it with the role it needs", m.name)
			continue
		}
		for _, r := range []string{"viewer", "operator", "admin"} {
			code := callMethod(e.ctx, conns[r], m.name, m.clientStream, m.serverStream)
			wantDenied := rank[r] < rank[role]
			if (code == codes.PermissionDenied) != wantDenied {
				t.Errorf("%s as %s = %v, want PermissionDenied %v (it needs %s)", m.name, r, code, wantDenied, role)
			}
			if code == codes.PermissionDenied {
				deniedBy[userOf[r]]++
			}
		}
	}
	log, _, _, err := e.st.ScanAudit(e.ctx, state.AuditQuery{}, 10000, 10000)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]int{}
	for _, en := range log {
		if en.Code == uint32(codes.PermissionDenied) {
			recorded[en.User]++
		}
	}
	for u, n := range deniedBy {
		if recorded[u] != n {
			t.Errorf("%d calls of %s were PermissionDenied, the audit log records %d", n, u, recorded[u])
		}
	}
}

// A removed user's open status watch ends with Unauthenticated at once,
// and its next call is refused.
func TestRemovedUsersStreamEnds(t *testing.T) {
	e := newEnv(t)
	admin := e.Operator()
	alice := pb.NewOperatorServiceClient(e.Dial(e.User("alice", pb.UserRole_USER_ROLE_VIEWER)))
	w, err := alice.WatchStatus(e.ctx, &pb.WatchStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if first.User != "alice" || first.Controller != "c-test" {
		t.Errorf("WatchStatus names user %q on controller %q, want alice on c-test", first.User, first.Controller)
	}
	removed := time.Now()
	if _, err := admin.RemoveUser(e.ctx, &pb.RemoveUserRequest{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := w.Recv()
		if err == nil {
			continue // a status sent before the removal
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("alice's watch ended with %v, want Unauthenticated", err)
		}
		break
	}
	t.Logf("alice's watch ended %v after her removal", time.Since(removed))
	if _, err := alice.Status(e.ctx, &pb.StatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Status by removed alice = %v, want Unauthenticated", err)
	}
}

// A registration token's secret works once, and not after it expired; a
// wrong secret and an unknown user get the same answer.
func TestRegistrationWorksOnceAndNotAfterExpiry(t *testing.T) {
	e := newEnvWithAddresses(t)
	admin := e.Operator()
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{e.addr}, CACert: e.ca.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	reg := pb.NewRegistrationServiceClient(conn)
	ca, err := reg.GetCA(e.ctx, &pb.GetCARequest{})
	if err != nil || ca.CaCert != string(e.ca.CertPEM()) {
		t.Fatalf("GetCA = %v, %v; want the model's CA", ca, err)
	}

	added, err := admin.AddUser(e.ctx, &pb.AddUserRequest{Name: "bob", Role: pb.UserRole_USER_ROLE_OPERATOR})
	if err != nil {
		t.Fatal(err)
	}
	if len(added.Controllers) == 0 || added.User.Registered || added.User.CreatedBy != "admin" {
		t.Errorf("AddUser = %v, want bob unregistered, created by admin, with the controllers' addresses", added)
	}
	cred, hash, err := pki.NewCredential(names.UserTag("bob"))
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := pki.NewSecret()
	for _, tc := range []struct {
		name, user, secret string
		want               codes.Code
	}{
		{"a wrong secret", "bob", wrong, codes.Unauthenticated},
		{"an unknown user", "nobody", added.Secret, codes.Unauthenticated},
		{"the secret", "bob", added.Secret, codes.OK},
		{"the secret again", "bob", added.Secret, codes.Unauthenticated},
	} {
		_, err := reg.Register(e.ctx, &pb.RegisterRequest{User: tc.user, Secret: tc.secret, CredentialHash: hash})
		if status.Code(err) != tc.want {
			t.Errorf("Register with %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	bob := pb.NewOperatorServiceClient(e.Dial(cred))
	who, err := bob.WhoAmI(e.ctx, &pb.WhoAmIRequest{})
	if err != nil || who.User.Name != "bob" || who.User.Role != pb.UserRole_USER_ROLE_OPERATOR || !who.User.Registered {
		t.Errorf("WhoAmI as bob = %v, %v; want bob, operator, registered", who, err)
	}

	// A token that expired.
	short, err := admin.AddUser(e.ctx, &pb.AddUserRequest{Name: "carol", ExpiresMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().UnixNano() <= short.ExpiresUnixNano {
		time.Sleep(time.Millisecond)
	}
	_, hash, _ = pki.NewCredential(names.UserTag("carol"))
	if _, err := reg.Register(e.ctx, &pb.RegisterRequest{User: "carol", Secret: short.Secret, CredentialHash: hash}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Register with an expired token = %v, want Unauthenticated", err)
	}

	// Every registration, refused or not, is in the audit log.
	log, _, _, err := e.st.ScanAudit(e.ctx, state.AuditQuery{}, 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	var registers []string
	for _, en := range log {
		if en.Rpc == "Register" {
			registers = append(registers, en.User+" "+codes.Code(en.Code).String())
		}
	}
	want := "[bob Unauthenticated nobody Unauthenticated bob OK bob Unauthenticated carol Unauthenticated]"
	if got := fmtList(registers); got != want {
		t.Errorf("the audit log's registrations = %s, want %s", got, want)
	}
}

func fmtList(xs []string) string {
	out := "["
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// The last admin is neither removed nor demoted; another admin makes it
// possible.
func TestTheLastAdminStays(t *testing.T) {
	e := newEnv(t)
	admin := e.Operator()
	for _, err := range []error{
		errOf(admin.RemoveUser(e.ctx, &pb.RemoveUserRequest{Name: "admin"})),
		errOf(admin.SetUserRole(e.ctx, &pb.SetUserRoleRequest{Name: "admin", Role: pb.UserRole_USER_ROLE_OPERATOR})),
	} {
		if status.Code(err) != codes.FailedPrecondition || !contains(err.Error(), "last admin") {
			t.Errorf("taking the last admin away = %v, want FailedPrecondition naming the last admin", err)
		}
	}
	e.User("ada", pb.UserRole_USER_ROLE_ADMIN)
	if _, err := admin.SetUserRole(e.ctx, &pb.SetUserRoleRequest{Name: "admin", Role: pb.UserRole_USER_ROLE_VIEWER}); err != nil {
		t.Fatalf("demoting admin with ada an admin: %v", err)
	}
	// admin is a viewer now.
	if _, err := admin.ListUsers(e.ctx, &pb.ListUsersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListUsers by the demoted admin = %v, want PermissionDenied", err)
	}
}

func errOf[T any](_ T, err error) error { return err }

// RotateCredential replaces the caller's credential: the old one stops
// working, the new one works.
func TestRotateCredential(t *testing.T) {
	e := newEnv(t)
	old := pb.NewOperatorServiceClient(e.Dial(e.User("alice", pb.UserRole_USER_ROLE_VIEWER)))
	cred, hash, err := pki.NewCredential(names.UserTag("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.RotateCredential(e.ctx, &pb.RotateCredentialRequest{CredentialHash: "not a hash"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("RotateCredential(not a hash) = %v, want InvalidArgument", err)
	}
	if _, err := old.RotateCredential(e.ctx, &pb.RotateCredentialRequest{CredentialHash: hash}); err != nil {
		t.Fatal(err)
	}
	if _, err := old.WhoAmI(e.ctx, &pb.WhoAmIRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("WhoAmI with the replaced credential = %v, want Unauthenticated", err)
	}
	if _, err := pb.NewOperatorServiceClient(e.Dial(cred)).WhoAmI(e.ctx, &pb.WhoAmIRequest{}); err != nil {
		t.Errorf("WhoAmI with the new credential: %v", err)
	}
}

// Following the audit log shows another user's change as its call ends,
// and entries filtered by user and entity.
func TestAuditFollowShowsAnotherUsersChange(t *testing.T) {
	e := newEnv(t)
	viewer := pb.NewOperatorServiceClient(e.Dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)))
	olga := pb.NewOperatorServiceClient(e.Dial(e.User("olga", pb.UserRole_USER_ROLE_OPERATOR)))
	if _, err := olga.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	f, err := viewer.Audit(ctx, &pb.AuditRequest{Follow: true, User: "olga"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := f.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Entries) != 1 || first.Entries[0].Rpc != "AddMachines" || first.Entries[0].User != "olga" {
		t.Fatalf("the log so far = %v, want olga's AddMachines", first.Entries)
	}
	// A viewer's refused change, then olga's destroy.
	if _, err := viewer.DestroyMachine(e.ctx, &pb.DestroyMachineRequest{Machine: "0"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("DestroyMachine by a viewer = %v, want PermissionDenied", err)
	}
	if _, err := olga.DestroyMachine(e.ctx, &pb.DestroyMachineRequest{Machine: "0"}); err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	next, err := f.Recv()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the follower saw olga's destroy %v after it returned", time.Since(done))
	if len(next.Entries) != 1 {
		t.Fatalf("followed %v, want olga's DestroyMachine alone", next.Entries)
	}
	en := next.Entries[0]
	if en.User != "olga" || en.Rpc != "DestroyMachine" || !en.Changed || en.Pending || en.Code != 0 ||
		fmtList(en.Targets) != "[machine:0]" || en.Summary != "destroy machine 0" || en.Controller != "c-test" {
		t.Errorf("followed entry = %v, want olga's DestroyMachine of machine 0, done", en)
	}
	// The viewer's refusal is there, by entity, and by method.
	for _, c := range []struct {
		what string
		req  *pb.AuditRequest
		want string
	}{
		{"entity machine:0", &pb.AuditRequest{Entity: "machine:0"}, "[vic DestroyMachine PermissionDenied olga DestroyMachine OK]"},
		{"rpc destroymachine", &pb.AuditRequest{Rpc: "destroymachine"}, "[vic DestroyMachine PermissionDenied olga DestroyMachine OK]"},
		{"rpc AddMachines of olga", &pb.AuditRequest{Rpc: "AddMachines", User: "olga"}, "[olga AddMachines OK]"},
		{"rpc Deploy", &pb.AuditRequest{Rpc: "Deploy"}, "[]"},
	} {
		if got, err := auditLines(e.ctx, viewer, c.req); err != nil || fmtList(got) != c.want {
			t.Errorf("Audit(%s) = %s, %v; want %s", c.what, fmtList(got), err, c.want)
		}
	}
	for _, rpc := range []string{"Destroy Machine", "kv/0", strings.Repeat("A", 65)} {
		_, err := auditLines(e.ctx, viewer, &pb.AuditRequest{Rpc: rpc})
		wantCode(t, fmt.Sprintf("Audit(rpc %.20q)", rpc), err, codes.InvalidArgument, "rpc ")
	}
}

// auditLines reads an Audit call's entries as "user rpc code".
func auditLines(ctx context.Context, c pb.OperatorServiceClient, req *pb.AuditRequest) ([]string, error) {
	all, err := c.Audit(ctx, req)
	if err != nil {
		return nil, err
	}
	var got []string
	for {
		r, err := all.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		for _, en := range r.Entries {
			got = append(got, en.User+" "+en.Rpc+" "+codes.Code(en.Code).String())
		}
	}
}

// One user may follow the audit log on a few streams of a controller at
// once, not all it serves: more are ResourceExhausted, while another user
// still follows; a stream that ends frees its place.
func TestAuditFollowsAreBoundedPerUser(t *testing.T) {
	e := newEnv(t)
	vic := pb.NewOperatorServiceClient(e.Dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)))
	olga := pb.NewOperatorServiceClient(e.Dial(e.User("olga", pb.UserRole_USER_ROLE_OPERATOR)))
	if _, err := olga.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1}); err != nil {
		t.Fatal(err)
	}
	// follow opens a stream following olga's entries and returns how its
	// first answer went: the log so far, or a refusal.
	follow := func(c pb.OperatorServiceClient) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(e.ctx)
		f, err := c.Audit(ctx, &pb.AuditRequest{Follow: true, User: "olga"})
		if err == nil {
			_, err = f.Recv()
		}
		return cancel, err
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := range 4 {
		cancel, err := follow(vic)
		cancels = append(cancels, cancel)
		if err != nil {
			t.Fatalf("vic's follow %d: %v", i+1, err)
		}
	}
	cancel, err := follow(vic)
	cancels = append(cancels, cancel)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("vic's fifth follow = %v, want ResourceExhausted", err)
	}
	cancel, err = follow(olga)
	cancels = append(cancels, cancel)
	if err != nil {
		t.Fatalf("olga's follow beside vic's four: %v", err)
	}
	cancels[0]()
	poll.UntilSays(t, "vic's follow after one of four ended served", func() (bool, string) {
		cancel, err := follow(vic)
		cancels = append(cancels, cancel)
		if err == nil {
			return true, ""
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("vic's follow after one of four ended = %v, want it served", err)
		}
		cancel()
		return false, err.Error()
	})
}

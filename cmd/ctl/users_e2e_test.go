package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lifelinehq/lifeline/apiclient"
	"github.com/lifelinehq/lifeline/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// registrationToken cuts the token out of ctl add-user's output.
func registrationToken(t *testing.T, out string) string {
	t.Helper()
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "lifeline-register-1.") {
			return f
		}
	}
	t.Fatalf("ctl add-user said:\n%s\nwant a registration token in it", out)
	return ""
}

// TestUsersAgainstAController: the admin adds a user, who registers with
// the token read from stdin into a client config of its own; roles hold;
// the audit log, followed by the admin, shows the user's deploy; the user
// is removed and refused.
func TestUsersAgainstAController(t *testing.T) {
	s := newSandbox(t)
	s.port = freePorts(t)
	s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(s.port), "--provider", "manual")
	t.Cleanup(func() { s.ctl(t, "kill-controller") })
	if out := s.ok(t, "whoami"); !strings.Contains(out, "user admin (admin) on controller ") {
		t.Errorf("ctl whoami as the bootstrap's admin said %q", out)
	}
	if out := s.ok(t, "status"); !strings.HasPrefix(out, "Controller ") || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "user admin") {
		t.Errorf("ctl status said:\n%s\nwant its first line to name the controller and user admin", out)
	}

	out := s.ok(t, "add-user", "alice", "--role", "viewer", "--expires", "1h")
	token := registrationToken(t, out)
	if !strings.Contains(out, "ctl register -") {
		t.Errorf("ctl add-user said:\n%s\nwant the command to run", out)
	}
	alice := filepath.Join(s.dir, "alice.json")
	reg := s.command(context.Background(), "register", "-", "--config", alice)
	reg.Stdin = strings.NewReader(token + "\n")
	if b, err := reg.CombinedOutput(); err != nil || !strings.Contains(string(b), "registered as alice (viewer)") {
		t.Fatalf("ctl register - = %v:\n%s", err, b)
	}
	if fi, err := os.Stat(alice); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("alice's client config: %v, %v; want mode 0600", fi, err)
	}
	s.fails(t, 1, []string{"registration of user \"alice\" is not valid"}, "register", token, "--config", filepath.Join(s.dir, "again.json"))
	if out := s.ok(t, "--config", alice, "whoami"); !strings.Contains(out, "user alice (viewer)") {
		t.Errorf("ctl whoami as alice said %q", out)
	}
	s.fails(t, 1, []string{"ctl: user alice (viewer) may not call AddMachines: it needs the operator role"}, "--config", alice, "add-machine")
	s.ok(t, "set-role", "alice", "operator")
	out = s.ok(t, "users", "--format", "json")
	if !strings.Contains(out, `"name": "alice"`) || !strings.Contains(out, `"role": "operator"`) {
		t.Errorf("ctl users --format json said:\n%s\nwant alice, operator", out)
	}
	s.fails(t, 1, []string{"ctl: user admin is the last admin"}, "remove-user", "admin")

	// The admin follows the audit log while alice deploys.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := s.command(ctx, "audit", "--follow", "--user", "alice", "--format", "json")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Wait()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deploy := s.command(context.Background(), "--config", alice, "deploy", "testdata/kv")
	if b, err := deploy.CombinedOutput(); err != nil {
		t.Fatalf("ctl deploy as alice: %v\n%s", err, b)
	}
	deployed := time.Now()
	var got []string
	for l := range lines {
		got = append(got, l)
		if strings.Contains(l, `"call":"Deploy"`) {
			t.Logf("ctl audit --follow showed alice's deploy %v after ctl deploy returned", time.Since(deployed))
			if !strings.Contains(l, `"user":"alice"`) || !strings.Contains(l, `"result":"OK"`) || !strings.Contains(l, `"service:kv"`) {
				t.Errorf("followed deploy = %s, want alice's, OK, naming service:kv", l)
			}
			break
		}
	}
	if len(got) == 0 || !strings.Contains(got[len(got)-1], `"call":"Deploy"`) {
		t.Errorf("ctl audit --follow showed %v, want alice's deploy", got)
	}
	refusal := false
	for _, l := range got {
		refusal = refusal || strings.Contains(l, `"call":"AddMachines"`) && strings.Contains(l, `"result":"PermissionDenied"`)
	}
	if !refusal {
		t.Errorf("ctl audit --follow showed %v, want alice's refused AddMachines among them", got)
	}
	cancel()

	s.ok(t, "remove-user", "alice")
	s.fails(t, 1, []string{"ctl: credential of user-alice is not valid"}, "--config", alice, "status")
	out = s.ok(t, "audit", "--entity", "kv")
	if !strings.Contains(out, "Deploy") || !strings.Contains(out, "alice") {
		t.Errorf("ctl audit --entity kv said:\n%s\nwant alice's deploy", out)
	}
}

// fakeRegistration answers GetCA with a CA of its own and counts the
// Register calls that reach it.
type fakeRegistration struct {
	pb.UnimplementedRegistrationServiceServer
	ca        []byte
	registers atomic.Int32
}

func (f *fakeRegistration) GetCA(context.Context, *pb.GetCARequest) (*pb.GetCAResponse, error) {
	return &pb.GetCAResponse{CaCert: string(f.ca)}, nil
}

func (f *fakeRegistration) Register(context.Context, *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	f.registers.Add(1)
	return &pb.RegisterResponse{}, nil
}

// ctl register sends the token's secret to no controller whose CA is not
// the one the token pins: a server at the token's address with another
// CA gets GetCA and nothing more.
func TestRegisterSendsNothingToAnotherCA(t *testing.T) {
	theirs, err := pki.NewCA("someone else", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := theirs.IssueServerCert([]string{apiclient.ServerName}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeRegistration{ca: theirs.CertPEM()}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLSConfig(cert))))
	pb.RegisterRegistrationServiceServer(srv, fake)
	go srv.Serve(lis)
	defer srv.Stop()

	ours, err := pki.NewCA("the model", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := pki.CAFingerprint(ours.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	secret, err := pki.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	token, err := pki.EncodeRegistrationToken(pki.RegistrationToken{Controllers: []string{lis.Addr().String()}, CAFingerprint: fp, User: "alice", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t)
	cfg := filepath.Join(s.dir, "alice.json")
	s.fails(t, 1, []string{"ctl: the controller's CA is not the one the token pins: not registering"}, "register", token, "--config", cfg)
	if n := fake.registers.Load(); n != 0 {
		t.Errorf("the server with another CA got %d Register calls, want none", n)
	}
	if _, err := os.Stat(cfg); !os.IsNotExist(err) {
		t.Errorf("a refused registration wrote %s (%v)", cfg, err)
	}
}

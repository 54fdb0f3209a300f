package main

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

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

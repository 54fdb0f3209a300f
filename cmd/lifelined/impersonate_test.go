package main_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// poseAsController serves, at a loopback address, a server whose
// certificate ca signed for the name clients verify, and which records the
// credential secret of the first call it gets; it returns the address and
// the channel the secret comes on.
func poseAsController(t *testing.T, ca *pki.CA) (string, <-chan string) {
	t.Helper()
	certPEM, keyPEM, err := ca.IssueServerCert([]string{apiclient.ServerName}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLSConfig(cert))),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			md, _ := metadata.FromIncomingContext(stream.Context())
			if s := md.Get(pki.MetadataSecret); len(s) > 0 {
				select {
				case got <- s[0]:
				default:
				}
			}
			return status.Error(codes.Unavailable, "not really a controller")
		}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), got
}

// collectsAdmin says whether the operator's ctl, given addr as the
// controller's address, hands its admin secret to whoever serves there.
func collectsAdmin(t *testing.T, ctx context.Context, cfg pki.ClientConfig, addr string, got <-chan string) bool {
	t.Helper()
	dial := apiclient.FromClientConfig(cfg)
	dial.Addresses = []string{addr}
	conn, err := apiclient.Dial(dial)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = pb.NewOperatorServiceClient(conn).Status(cctx, &pb.StatusRequest{})
	select {
	case s := <-got:
		return s == cfg.Secret
	default:
		return false
	}
}

// TestEtcdReaderCannotPoseAsTheController reads everything a controller
// stored in an external etcd, as someone holding read access to the
// namespace (or a backup) may, and tries every value as the CA's private
// key: with it one could serve as the controller and collect the admin
// credential of the operator's ctl, which trusts the CA alone. No value
// may be the key, and the key-encryption key that seals it must not be in
// etcd in any form. The same steps with the key from the controller's
// data directory show that the impersonation itself works.
func TestEtcdReaderCannotPoseAsTheController(t *testing.T) {
	dir, etcd := testEtcd(t, "ll-imp-")
	_, cfg := startController(t, dir, "--etcd-endpoints", etcd.Endpoint(), "--namespace", "/imp/")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctx, "/imp/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var caCert []byte
	for _, kv := range resp.Kvs {
		if string(kv.Key) == "/imp/controller/ca-cert" {
			caCert = kv.Value
		}
	}
	if !bytes.Equal(bytes.TrimSpace(caCert), bytes.TrimSpace([]byte(cfg.CACert))) {
		t.Fatalf("etcd holds no copy of the CA the operator trusts")
	}
	for _, kv := range resp.Kvs {
		ca, err := pki.ParseCA(caCert, kv.Value)
		if err != nil {
			continue
		}
		addr, got := poseAsController(t, ca)
		if collectsAdmin(t, ctx, cfg, addr, got) {
			t.Fatalf("%s holds the CA's key: a server signed with it collected the operator's admin credential", kv.Key)
		}
		t.Fatalf("%s holds the CA's key", kv.Key)
	}

	// The key-encryption key (where the controller keeps it) is not in
	// etcd, raw or encoded.
	if text, err := os.ReadFile(filepath.Join(dir, "ctl", "pki", "ca-kek")); err == nil {
		enc := strings.TrimSpace(string(text))
		kek, err := base64.RawURLEncoding.DecodeString(enc[strings.LastIndexByte(enc, '.')+1:])
		if err != nil || len(kek) != 32 {
			t.Fatalf("the key-encryption key file holds %q", text)
		}
		forms := [][]byte{kek, []byte(enc), []byte(hex.EncodeToString(kek)), []byte(base64.StdEncoding.EncodeToString(kek)),
			[]byte(base64.RawStdEncoding.EncodeToString(kek)), []byte(base64.RawURLEncoding.EncodeToString(kek))}
		for _, kv := range resp.Kvs {
			for _, f := range forms {
				if bytes.Contains(kv.Value, f) {
					t.Errorf("%s holds the key-encryption key", kv.Key)
				}
			}
		}
	}

	// The control: the data directory's own key (which only the
	// controller's host holds) does let a server collect the credential.
	ca, _, err := pki.LoadOrCreateCA(filepath.Join(dir, "ctl", "pki"))
	if err != nil {
		t.Fatal(err)
	}
	addr, got := poseAsController(t, ca)
	if !collectsAdmin(t, ctx, cfg, addr, got) {
		t.Fatalf("a server signed with the CA's own key did not collect the admin credential: the attack above proves nothing")
	}
}

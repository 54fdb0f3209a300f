package apiclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/lifelinehq/lifeline/pki"
)

// ServerName is the name every controller's certificate carries and every
// client verifies, whatever address it dialled: controllers of one model
// share a CA, and a client may reach any of them.
const ServerName = "lifeline-controller"

// Config says where the controllers are and who is calling.
type Config struct {
	// Addresses are host:port addresses of the controllers.
	Addresses []string
	// CACert is the PEM of the controllers' CA.
	CACert []byte
	// Credential is sent with every call. When it is zero, the connection
	// carries none: each caller adds its own with As, so that several
	// agents (a machine's units) share one connection.
	Credential pki.Credential
}

// Validate reports a configuration Dial cannot use.
func (c Config) Validate() error {
	if len(c.Addresses) == 0 {
		return errors.New("no controller addresses")
	}
	if c.Credential == (pki.Credential{}) {
		return nil
	}
	return c.Credential.Validate()
}

// Dial returns a connection to the controllers. It does not wait for one
// to answer: calls wait for a connection (gRPC's wait-for-ready is off, so
// a call fails with Unavailable when no controller can be reached).
func Dial(cfg Config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("controller connection: %w", err)
	}
	tlsCfg, err := pki.ClientTLSConfig(cfg.CACert, ServerName)
	if err != nil {
		return nil, fmt.Errorf("controller connection: %w", err)
	}
	r := manual.NewBuilderWithScheme("lifeline")
	addrs := make([]resolver.Address, len(cfg.Addresses))
	for i, a := range cfg.Addresses {
		addrs[i] = resolver.Address{Addr: a}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	if cfg.Credential != (pki.Credential{}) {
		opts = append(opts, grpc.WithPerRPCCredentials(cfg.Credential))
	}
	opts = append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second,
		}, MinConnectTimeout: 5 * time.Second}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}, opts...)
	conn, err := grpc.NewClient(r.Scheme()+":///controller", opts...)
	if err != nil {
		return nil, fmt.Errorf("controller connection: %w", err)
	}
	return conn, nil
}

// FromClientConfig is the Config of a client config file.
func FromClientConfig(c pki.ClientConfig) Config {
	return Config{Addresses: c.Controllers, CACert: []byte(c.CACert), Credential: c.Credential()}
}

// As returns a connection that makes every call on cc with cred: several
// callers with their own credentials share one connection (Dial it with no
// credential of its own).
func As(cc grpc.ClientConnInterface, cred pki.Credential) grpc.ClientConnInterface {
	return credConn{cc: cc, cred: grpc.PerRPCCredentials(cred)}
}

type credConn struct {
	cc   grpc.ClientConnInterface
	cred grpc.CallOption
}

func (c credConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.cc.Invoke(ctx, method, args, reply, append(opts, c.cred)...)
}

func (c credConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.cc.NewStream(ctx, desc, method, append(opts, c.cred)...)
}

package apiclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
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
	c, err := DialConn(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return c.ClientConn, nil
}

// Conn is a connection to the controllers whose addresses may change while
// it is in use (Follow): controllers come and go, and agents that outlive
// them move to the ones that replace them.
type Conn struct {
	*grpc.ClientConn
	r *addrResolver
}

// DialConn is Dial, returning a Conn.
func DialConn(cfg Config, opts ...grpc.DialOption) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("controller connection: %w", err)
	}
	tlsCfg, err := pki.ClientTLSConfig(cfg.CACert, ServerName)
	if err != nil {
		return nil, fmt.Errorf("controller connection: %w", err)
	}
	r := &addrResolver{addrs: slices.Clone(cfg.Addresses)}
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
		// Fixed flow-control windows, as the controller's: gRPC's dynamic
		// ones have each side ping the other whenever data comes after a
		// quiet spell, to estimate the link's bandwidth, and an agent's
		// watch events come in small bursts (controller/server.go).
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
	}, opts...)
	conn, err := grpc.NewClient(r.Scheme()+":///controller", opts...)
	if err != nil {
		return nil, fmt.Errorf("controller connection: %w", err)
	}
	return &Conn{ClientConn: conn, r: r}, nil
}

// Addresses returns the controller addresses the connection dials.
func (c *Conn) Addresses() []string { return c.r.get() }

// SetAddresses makes the connection dial addrs from now on (a call in
// flight keeps its controller) and reports whether they differ from before
// (as sets). An empty list changes nothing.
func (c *Conn) SetAddresses(addrs []string) bool { return c.r.set(addrs) }

// Follow asks fetch for the controller addresses at once and then every
// interval until ctx ends; whenever they change, the connection dials the
// new ones and save records them (in the agent's config, so that a restart
// finds them). Failures are retried at the next interval.
func (c *Conn) Follow(ctx context.Context, every time.Duration, fetch func(context.Context) ([]string, error), save func([]string) error) {
	for {
		if addrs, err := fetch(ctx); err == nil && c.SetAddresses(addrs) && save != nil {
			save(c.Addresses())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// addrResolver resolves the connection's one target to the current list of
// addresses, and pushes every new list to the channel while it is built.
type addrResolver struct {
	mu    sync.Mutex
	addrs []string
	cc    resolver.ClientConn // nil while not built (an idle channel)
	// push serializes pushes to cc, so that the last list set is the last
	// one pushed.
	push sync.Mutex
}

func (r *addrResolver) Scheme() string { return "lifeline" }

func (r *addrResolver) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	r.push.Lock()
	defer r.push.Unlock()
	r.mu.Lock()
	r.cc = cc
	addrs := r.addrs
	r.mu.Unlock()
	cc.UpdateState(stateOf(addrs))
	return built{r}, nil
}

func (r *addrResolver) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.addrs)
}

func (r *addrResolver) set(addrs []string) bool {
	if len(addrs) == 0 {
		return false
	}
	r.push.Lock()
	defer r.push.Unlock()
	r.mu.Lock()
	same := sameSet(r.addrs, addrs)
	r.addrs = slices.Clone(addrs)
	cc := r.cc
	r.mu.Unlock()
	if !same && cc != nil {
		cc.UpdateState(stateOf(addrs))
	}
	return !same
}

func stateOf(addrs []string) resolver.State {
	s := resolver.State{}
	for _, a := range addrs {
		s.Addresses = append(s.Addresses, resolver.Address{Addr: a})
	}
	return s
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// built is the resolver of one built channel.
type built struct{ r *addrResolver }

func (built) ResolveNow(resolver.ResolveNowOptions) {}

func (b built) Close() {
	b.r.mu.Lock()
	b.r.cc = nil
	b.r.mu.Unlock()
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

// Renewable is a credential its holder may replace while calls use it:
// a unit agent's, which its machine agent has issued again when the
// controller stops accepting it.
type Renewable interface {
	// Current is the credential a call starting now carries.
	Current() pki.Credential
	// Refused says that the controller refused cred, which a call
	// carried, as Unauthenticated.
	Refused(cred pki.Credential)
}

// AsRenewable is As with a credential that may be replaced: each call
// carries cred's Current credential as the call starts, and a call the
// controller refuses as Unauthenticated (a unary call's answer, or a
// stream's end) is reported to cred's Refused with the credential it
// carried, so that a refusal of a credential already replaced can be told
// from one of the current.
func AsRenewable(cc grpc.ClientConnInterface, cred Renewable) grpc.ClientConnInterface {
	return renewingConn{cc: cc, cred: cred}
}

type renewingConn struct {
	cc   grpc.ClientConnInterface
	cred Renewable
}

func (c renewingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	cred := c.cred.Current()
	err := c.cc.Invoke(ctx, method, args, reply, append(opts, grpc.PerRPCCredentials(cred))...)
	if status.Code(err) == codes.Unauthenticated {
		c.cred.Refused(cred)
	}
	return err
}

func (c renewingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cred := c.cred.Current()
	s, err := c.cc.NewStream(ctx, desc, method, append(opts, grpc.PerRPCCredentials(cred))...)
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			c.cred.Refused(cred)
		}
		return nil, err
	}
	return renewingStream{ClientStream: s, refused: func() { c.cred.Refused(cred) }}, nil
}

// renewingStream reports a stream the controller ends as Unauthenticated.
type renewingStream struct {
	grpc.ClientStream
	refused func()
}

func (s renewingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if status.Code(err) == codes.Unauthenticated {
		s.refused()
	}
	return err
}

// streamWindow and connWindow are the flow-control windows of a stream and
// of the connection: what the controller may send before the client reads
// it. A charm download over a link of 50 ms round trip moves at up to 20
// MiB a second.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

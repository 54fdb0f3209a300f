package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// callTimeout bounds every unary call; streams (status --watch, wait) have
// none.
const callTimeout = 30 * time.Second

// defaultClientConfigPath is where every command reads the client config:
// $LIFELINE_CONFIG, else the current controller's in the client store.
// It is absolute, so that it means the same to the controller bootstrap
// starts in its data directory.
func defaultClientConfigPath() (string, error) {
	if s, ok := userClientStore(); ok {
		return filepath.Abs(s.path(s.current()))
	}
	p, err := pki.DefaultClientConfigPath()
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// client is a connection to the controller named by the client config.
type client struct {
	conn  *grpc.ClientConn
	op    pb.OperatorServiceClient
	addrs []string
}

// clientConfigPath is the client config every command but bootstrap
// reads: --config, else $LIFELINE_CONFIG or the default.
func (e *env) clientConfigPath() (string, error) {
	if e.configFlag != "" {
		return filepath.Abs(e.configFlag)
	}
	return e.configPath, e.configErr
}

// configFlagNotASetting refuses a --config that names no file but reads
// as a service's setting (port=9000): someone used to juju deploy
// --config meant deploy's --service-config, and is told so rather than
// that the client config "port=9000" is missing.
func (e *env) configFlagNotASetting() error {
	if !strings.Contains(e.configFlag, "=") {
		return nil
	}
	if _, err := os.Stat(e.configFlag); err == nil {
		return nil
	}
	return fmt.Errorf("--config %s: --config names the client config file; a service's setting is --service-config %s", e.configFlag, e.configFlag)
}

// readConfig reads the client config, saying what to do when there is none.
func (e *env) readConfig() (pki.ClientConfig, error) {
	path, err := e.clientConfigPath()
	if err != nil {
		return pki.ClientConfig{}, err
	}
	cfg, err := pki.ReadClientConfig(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, fmt.Errorf("no client config at %s: run `ctl bootstrap` to start a controller, or `ctl register` with a registration token (or `ctl switch` to a controller ctl knows, or name the client config of a running one with --config or LIFELINE_CONFIG)", path)
	}
	if err != nil {
		return cfg, err
	}
	return withCachedAddresses(cfg, path), nil
}

// connect reads the client config and dials its controller. It does not
// wait for an answer: the first call tells.
func (e *env) connect() (*client, error) {
	cfg, err := e.readConfig()
	if err != nil {
		return nil, err
	}
	return dial(cfg)
}

func dial(cfg pki.ClientConfig) (*client, error) {
	conn, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		return nil, err
	}
	return &client{conn: conn, op: pb.NewOperatorServiceClient(conn), addrs: cfg.Controllers}, nil
}

func (c *client) close() { c.conn.Close() }

// callContext bounds one unary call.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

// streamContext is the context of a stream's call: bounded as a call is
// (callContext), unless the stream is followed until interrupted.
func streamContext(ctx context.Context, follow bool) (context.Context, context.CancelFunc) {
	if follow {
		return context.WithCancel(ctx)
	}
	return callContext(ctx)
}

// check turns a failed call into what ctl reports: a refusal stays the
// controller's status (its message is printed as is); a call that never
// reached a controller says so, with the address.
func (c *client) check(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	reached := c.conn.GetState() == connectivity.Ready
	switch st.Code() {
	case codes.Unavailable:
		if !reached {
			return unreachableError{addrs: c.addrs, detail: dialDetail(st.Message())}
		}
	case codes.DeadlineExceeded:
		if !reached {
			return unreachableError{addrs: c.addrs, detail: "no connection within " + callTimeout.String()}
		}
		if st.Message() == context.DeadlineExceeded.Error() {
			return fmt.Errorf("the controller at %s did not answer within %s", strings.Join(c.addrs, ", "), callTimeout)
		}
	case codes.Canceled:
		if st.Message() == context.Canceled.Error() {
			return errors.New("interrupted")
		}
	}
	return err
}

// unreachableError says that no controller could be reached.
type unreachableError struct {
	addrs  []string
	detail string
}

func (u unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the controller at %s: %s", strings.Join(u.addrs, ", "), u.detail)
}

// dialDetail shortens gRPC's description of a failed connection to its
// cause, for a message a person reads (the code already said what kind of
// failure it is; this only trims words).
func dialDetail(msg string) string {
	for _, marker := range []string{"Error while dialing: ", "desc = "} {
		if i := strings.LastIndex(msg, marker); i >= 0 {
			msg = msg[i+len(marker):]
			break
		}
	}
	return strings.Trim(msg, `"`)
}

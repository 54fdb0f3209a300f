package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/run"
	"github.com/spf13/pflag"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/dashboard"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/watchhub"
	"github.com/lifelinehq/lifeline/state"
)

// dashboardFlags are the dashboard's flags.
type dashboardFlags struct {
	addr       string
	sessionTTL time.Duration
}

func (d *dashboardFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&d.addr, "dashboard-addr", "", "address the web dashboard is served on over HTTPS (default: the API's host, its port + 2); none for no dashboard")
	fl.DurationVar(&d.sessionTTL, "dashboard-session-ttl", 12*time.Hour, "how long a dashboard login lasts")
}

func (d *dashboardFlags) validate() error {
	if d.sessionTTL <= 0 || d.sessionTTL > state.MaxDashboardSessionTTL {
		return usageError{fmt.Errorf("--dashboard-session-ttl %s: want more than 0 and up to %s", d.sessionTTL, state.MaxDashboardSessionTTL)}
	}
	if d.addr == "" || d.addr == "none" {
		return nil
	}
	if _, _, err := net.SplitHostPort(d.addr); err != nil {
		return usageError{fmt.Errorf("--dashboard-addr %q: %w", d.addr, err)}
	}
	return nil
}

// listen opens the dashboard's listener and says its URL, on the host
// clients reach the API at (advertise's first, which the server
// certificate names); nil when there is none. A port taken by something
// else when the address is the default leaves the controller without a
// dashboard, with a warning: only an address asked for is a must.
func (d *dashboardFlags) listen(apiAddr string, advertise []string, logger hclog.Logger) (net.Listener, string, error) {
	if d.addr == "none" {
		return nil, "", nil
	}
	addr := d.addr
	if addr == "" {
		host, port, err := net.SplitHostPort(apiAddr)
		if err != nil {
			return nil, "", err
		}
		p, err := strconv.Atoi(port)
		if err != nil || p == 0 {
			logger.Warn("no dashboard: the API's port is not fixed; give --dashboard-addr", "api", apiAddr)
			return nil, "", nil
		}
		addr = net.JoinHostPort(host, strconv.Itoa(p+2))
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		if d.addr == "" {
			logger.Warn("no dashboard: its default address is taken; give --dashboard-addr", "addr", addr, "error", err)
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("dashboard listener: %w", err)
	}
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	host, _, _ := net.SplitHostPort(addr)
	if len(advertise) > 0 {
		if h, _, err := net.SplitHostPort(advertise[0]); err == nil && h != "" {
			host = h
		}
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return lis, "https://" + net.JoinHostPort(host, port), nil
}

// serveDashboard serves the dashboard on lis over TLS with the
// controller's certificate, in g.
func serveDashboard(g *run.Group, lis net.Listener, d dashboardFlags, api *controller.Server, st *state.State, hub *watchhub.Hub, cert tls.Certificate, logger hclog.Logger) error {
	srv, err := dashboard.New(dashboard.Config{API: api, State: st, Hub: hub, Logger: logger, SessionTTL: d.sessionTTL})
	if err != nil {
		return err
	}
	tc := pki.ServerTLSConfig(cert)
	tc.NextProtos = []string{"h2", "http/1.1"}
	hs := &http.Server{Handler: srv.Handler(), TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: dashboard.MaxHeaderBytes,
		ErrorLog:       logger.Named("dashboard").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	g.Add(func() error {
		logger.Info("dashboard serving", "addr", lis.Addr().String())
		if err := hs.ServeTLS(lis, "", ""); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func(error) { hs.Close() })
	return nil
}

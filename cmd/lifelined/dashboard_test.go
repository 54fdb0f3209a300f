package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestDashboardAddr(t *testing.T) {
	// The API's port is taken by this listener, so that +2 is likely free
	// and the test's own.
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Addr().String())
	logger := hclog.NewNullLogger()

	d := dashboardFlags{sessionTTL: time.Hour}
	lis, url, err := d.listen(api.Addr().String(), []string{"ctl.example:" + port}, logger)
	if err != nil {
		t.Skipf("the API's port + 2 is taken here: %v", err)
	}
	defer lis.Close()
	_, dport, _ := net.SplitHostPort(lis.Addr().String())
	if url != "https://ctl.example:"+dport || dport == port {
		t.Errorf("default dashboard at %s (%s), want the advertised host and the API's port + 2", url, lis.Addr())
	}
	// Taken, the default is given up with a warning; an address asked
	// for is a must.
	again, url2, err := d.listen(api.Addr().String(), nil, logger)
	if again != nil || url2 != "" || err != nil {
		t.Errorf("default dashboard address taken: listener %v, url %q, error %v; want none, without an error", again, url2, err)
	}
	d.addr = lis.Addr().String()
	if _, _, err := d.listen(api.Addr().String(), nil, logger); err == nil || !strings.Contains(err.Error(), "dashboard listener") {
		t.Errorf("--dashboard-addr taken: error %v, want the listener's", err)
	}
	d.addr = "none"
	if l, u, err := d.listen(api.Addr().String(), nil, logger); l != nil || u != "" || err != nil {
		t.Errorf("--dashboard-addr none: %v %q %v, want no dashboard", l, u, err)
	}
	for _, bad := range []dashboardFlags{{addr: "nonsense", sessionTTL: time.Hour}, {sessionTTL: 0}, {sessionTTL: 30 * 24 * time.Hour}} {
		if err := bad.validate(); err == nil {
			t.Errorf("validate(%+v) = nil, want a usage error", bad)
		}
	}
}

package hooks_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/charm"
)

// fakePorts is a hook's Context with ports: opened ports kept as the unit
// agent keeps them (hooks.OpenPortIn, hooks.ClosePortIn).
type fakePorts struct {
	*fakeContext
	opened []charm.PortRange
}

func (f *fakePorts) OpenPort(_ context.Context, p charm.PortRange) error {
	ps, err := hooks.OpenPortIn(f.opened, p)
	if err == nil {
		f.opened = ps
	}
	return err
}

func (f *fakePorts) ClosePort(_ context.Context, p charm.PortRange) error {
	ps, err := hooks.ClosePortIn(f.opened, p)
	if err == nil {
		f.opened = ps
	}
	return err
}

func (f *fakePorts) OpenedPorts(context.Context) ([]charm.PortRange, error) {
	return slices.Clone(f.opened), nil
}

func port(t *testing.T, s string) charm.PortRange {
	t.Helper()
	p, err := charm.ParsePort(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPortTools: open-port and close-port parse a port or a range, tcp by
// default, and refuse icmp and anything else; opened-ports lists them
// sorted, in text or json.
func TestPortTools(t *testing.T) {
	a := startAgent(t)
	tests := []struct {
		name     string
		open     []string // opened before the call
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
		want     []string // opened after the call
	}{
		{name: "open a port", args: []string{"open-port", "8080"}, want: []string{"8080/tcp"}},
		{name: "open tcp", args: []string{"open-port", "8080/tcp"}, want: []string{"8080/tcp"}},
		{name: "open udp, upper case", args: []string{"open-port", "53/UDP"}, want: []string{"53/udp"}},
		{name: "open a range", args: []string{"open-port", "9000-9010/udp"}, want: []string{"9000-9010/udp"}},
		{name: "open one open already", open: []string{"8080/tcp"}, args: []string{"open-port", "8080"}, want: []string{"8080/tcp"}},
		{name: "open the same port of another protocol", open: []string{"8080/tcp"}, args: []string{"open-port", "8080/udp"}, want: []string{"8080/tcp", "8080/udp"}},
		{name: "open an overlapping range", open: []string{"9000-9010/tcp"}, args: []string{"open-port", "9005"},
			wantErr: "open-port: cannot open 9005/tcp: it overlaps 9000-9010/tcp, open already: close that first\n", wantCode: 1, want: []string{"9000-9010/tcp"}},
		{name: "open icmp", args: []string{"open-port", "icmp"},
			wantErr: `open-port: "icmp": icmp is not supported: a port claim is a tcp or udp port on the host, which icmp has none of` + "\n", wantCode: 2},
		{name: "open port 0", args: []string{"open-port", "0"}, wantErr: `open-port: "0/tcp" is invalid: ports are from 1 to 65535` + "\n", wantCode: 2},
		{name: "open a backwards range", args: []string{"open-port", "10-9"}, wantErr: `open-port: "10-9/tcp" is invalid: the range ends before it starts` + "\n", wantCode: 2},
		{name: "open sctp", args: []string{"open-port", "80/sctp"}, wantErr: `open-port: "80/sctp" is invalid: protocol "sctp" is not tcp or udp` + "\n", wantCode: 2},
		{name: "open nothing", args: []string{"open-port"}, wantErr: "open-port: name one port or range: PORT[/PROTOCOL] or FROM-TO[/PROTOCOL]\n", wantCode: 2},
		{name: "open two", args: []string{"open-port", "80", "81"}, wantErr: "open-port: name one port or range: PORT[/PROTOCOL] or FROM-TO[/PROTOCOL]\n", wantCode: 2},
		{name: "open with endpoints", args: []string{"open-port", "--endpoints", "db", "80"}, wantErr: "open-port: unknown flag --endpoints: see open-port --help\n", wantCode: 2},
		{name: "close", open: []string{"8080/tcp", "53/udp"}, args: []string{"close-port", "8080"}, want: []string{"53/udp"}},
		{name: "close a range", open: []string{"9000-9010/udp"}, args: []string{"close-port", "9000-9010/udp"}},
		{name: "close one not open", open: []string{"53/udp"}, args: []string{"close-port", "53/tcp"}, want: []string{"53/udp"}},
		{name: "close part of a range", open: []string{"9000-9010/tcp"}, args: []string{"close-port", "9005"},
			wantErr: "close-port: cannot close 9005/tcp: 9000-9010/tcp is open: close it as it was opened\n", wantCode: 1, want: []string{"9000-9010/tcp"}},
		{name: "close icmp", args: []string{"close-port", "icmp"},
			wantErr: `close-port: "icmp": icmp is not supported: a port claim is a tcp or udp port on the host, which icmp has none of` + "\n", wantCode: 2},
		{name: "opened-ports", open: []string{"9000-9010/udp", "8080/tcp", "53/udp", "443/tcp"}, args: []string{"opened-ports"},
			wantOut: "443/tcp\n8080/tcp\n53/udp\n9000-9010/udp\n", want: []string{"9000-9010/udp", "8080/tcp", "53/udp", "443/tcp"}},
		{name: "opened-ports json", open: []string{"8080/tcp", "53/udp"}, args: []string{"opened-ports", "--format=json"},
			wantOut: `["8080/tcp","53/udp"]` + "\n", want: []string{"8080/tcp", "53/udp"}},
		{name: "opened-ports none, json", args: []string{"opened-ports", "--format", "json"}, wantOut: "[]\n"},
		{name: "opened-ports with an argument", args: []string{"opened-ports", "x"}, wantErr: `opened-ports: unexpected argument "x": see opened-ports --help` + "\n", wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakePorts{fakeContext: newFakeContext()}
			for _, s := range tt.open {
				f.opened = append(f.opened, port(t, s))
			}
			h := a.begin(t, f)
			out, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], nil, tt.args...)
			if out != tt.wantOut || errOut != tt.wantErr || code != tt.wantCode {
				t.Errorf("%s = stdout %q, stderr %q, exit %d; want %q, %q, %d",
					strings.Join(tt.args, " "), out, errOut, code, tt.wantOut, tt.wantErr, tt.wantCode)
			}
			var got []string
			for _, p := range f.opened {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("%s: opened %q, want %q", strings.Join(tt.args, " "), got, tt.want)
			}
		})
	}
}

// TestPortToolsOutsideHooks: a Context without ports (an action's) makes
// the port tools fail, saying why.
func TestPortToolsOutsideHooks(t *testing.T) {
	a := startAgent(t)
	h := a.begin(t, newFakeContext())
	for _, args := range [][]string{{"open-port", "80"}, {"close-port", "80"}, {"opened-ports"}} {
		_, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], nil, args...)
		if want := args[0] + ": not running a hook: only a unit's hooks may open or close its ports\n"; errOut != want || code != 1 {
			t.Errorf("%v outside a hook = stderr %q, exit %d; want %q, 1", args, errOut, code, want)
		}
	}
}

// TestOpenPortBound: at most hooks.MaxOpenedPorts are open at once.
func TestOpenPortBound(t *testing.T) {
	var ps []charm.PortRange
	for i := 1; i <= hooks.MaxOpenedPorts; i++ {
		var err error
		if ps, err = hooks.OpenPortIn(ps, charm.PortRange{From: uint16(i), To: uint16(i), Protocol: charm.TCP}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hooks.OpenPortIn(ps, charm.PortRange{From: 1000, To: 1000, Protocol: charm.TCP}); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("opening port %d = %v, want refused past the bound", hooks.MaxOpenedPorts+1, err)
	}
}

package examples

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostclaims"
	"github.com/lifelinehq/lifeline/internal/hostexec"
)

// The charms' servers are host daemons (metadata.yaml's host section): the
// machine agent writes the claimed files and keeps the daemons running,
// and the hooks only wait for them. These helpers stand in for the agent
// around the hooks, with the real pieces: hostclaims renders the claims
// from the fake config and address, hostexec writes the files and a
// hostexec.Supervisor runs the daemons (restarting those that end).

// host is a unit's stand-in machine agent.
type host struct {
	u   *unit
	sup *hostexec.Supervisor
	// applied are the claims in place, nil before the first files job.
	applied *hostclaims.Claims
}

// newHost starts the unit's supervisor; the test's end stops its daemons.
func newHost(u *unit) *host {
	u.t.Helper()
	sup, err := hostexec.NewSupervisor(hostexec.SupervisorConfig{
		StateFile:      filepath.Join(filepath.Dir(u.dir), "supervisor.json"),
		UnitDir:        func(string) string { return u.dir },
		InitialBackoff: 100 * time.Millisecond,
		PollInterval:   50 * time.Millisecond,
	})
	if err != nil {
		u.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sup.Run(ctx)
	}()
	u.t.Cleanup(func() {
		cancel()
		<-done
		if err := sup.StopAll(u.name); err != nil {
			u.t.Errorf("stop %s's daemons: %v", u.name, err)
		}
	})
	return &host{u: u, sup: sup}
}

// claims renders the unit's claims with the fake config (integers where
// they parse) and address, as its agent does.
func (h *host) claims() *hostclaims.Claims {
	u := h.u
	u.t.Helper()
	c, err := charm.ReadDir(filepath.Join(u.dir, "charm"))
	if err != nil {
		u.t.Fatal(err)
	}
	config := map[string]any{}
	entries, err := os.ReadDir(filepath.Join(u.fake, "config"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		u.t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(u.fake, "config", e.Name()))
		if err != nil {
			u.t.Fatal(err)
		}
		v := strings.TrimSpace(string(b))
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			config[e.Name()] = n
		} else {
			config[e.Name()] = v
		}
	}
	addr, err := os.ReadFile(filepath.Join(u.fake, "address"))
	if err != nil {
		u.t.Fatal(err)
	}
	out, err := hostclaims.Render(c.Meta.Host, config, hostclaims.Facts{
		Unit: u.name, Service: strings.Split(u.name, "/")[0], MachineID: "0",
		UnitDir: u.dir, MachineAddress: strings.TrimSpace(string(addr)),
	})
	if err != nil {
		u.t.Fatal(err)
	}
	return out
}

// files is the unit's host-claims job: it writes the claimed files.
func (h *host) files() {
	u := h.u
	u.t.Helper()
	c := h.claims()
	for _, f := range c.Files {
		if _, err := hostexec.WriteFile(u.dir, hostexec.File{Path: f.Path, Content: f.Content, Mode: f.Mode}); err != nil {
			u.t.Fatal(err)
		}
	}
	h.applied = c
}

// daemons is the unit's host-daemons job: it runs the daemons of the
// claims the files job applied, restarting those whose spec changed.
func (h *host) daemons() {
	u := h.u
	u.t.Helper()
	for _, d := range h.applied.Daemons {
		spec := hostexec.Daemon{Name: d.Name, Command: d.Command, Env: d.Env, StopTimeout: d.StopTimeout}
		if _, err := h.sup.Ensure(u.name, spec); err != nil {
			u.t.Fatal(err)
		}
	}
}

// shutdown stops the unit's daemons, as a dying unit's host-release job.
func (h *host) shutdown() {
	h.u.t.Helper()
	for _, d := range h.applied.Daemons {
		if _, err := h.sup.Stop(h.u.name, d.Name); err != nil {
			h.u.t.Fatal(err)
		}
	}
}

// deploy runs a new unit's steps in the agent's order: files, install,
// config-changed, daemons, start.
func (h *host) deploy() {
	h.u.t.Helper()
	h.files()
	h.u.mustRun("install")
	h.u.mustRun("config-changed")
	h.daemons()
	h.u.mustRun("start")
}

// change runs a config change's steps: files, config-changed, daemons.
func (h *host) change() {
	h.u.t.Helper()
	h.files()
	h.u.mustRun("config-changed")
	h.daemons()
}

// pid returns the pid of the unit's daemon name, 0 unless it runs.
func (h *host) pid(name string) int {
	for _, st := range h.sup.States(h.u.name) {
		if st.Name == name && st.State == hostexec.Running {
			return st.Pid
		}
	}
	return 0
}

package machineagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/lifelinehq/lifeline/internal/hostexec"
)

// The host's side of the units' claims (package hostexec).
//
// The agent owns one hostexec.Supervisor, the machine's daemons, and one
// hostexec.Packages, the machine's package claims, both recorded in its
// data directory (daemons.json, packages.json), and lends them to its unit
// agents as one hostexec.Host (unitagent.Config.Host), whose jobs carry
// out each unit's claims. The supervisor is made as Run starts, once the
// agent holds its data directory: it adopts the daemons an earlier run
// left running (they outlive the agent, even a SIGKILL) and starts the
// others; its Run watches them in the agent's wait group. A unit's
// daemons and files go with it when it is removed or forced out
// (cleanHost), before its directory does: hostexec keeps the record of
// what the unit wrote there.

// DaemonsFile names the record of the machine's daemons in the agent's
// data directory; hostexec.PackagesFile is beside it.
const DaemonsFile = "daemons.json"

// openHost makes the machine's Host: its supervisor adopts the daemons
// recorded. The package manager is the configured one, or none.
func (a *Agent) openHost() (*hostexec.Host, error) {
	mgr := a.cfg.PackageManager
	if mgr == nil {
		mgr = hostexec.None{}
	}
	sup, err := hostexec.NewSupervisor(hostexec.SupervisorConfig{
		StateFile: filepath.Join(a.cfg.DataDir, DaemonsFile),
		UnitDir:   a.unitDir,
		Logger:    a.logger.Named("daemons"),
	})
	if err != nil {
		return nil, fmt.Errorf("machine agent: daemons: %w", err)
	}
	return &hostexec.Host{Packages: hostexec.NewPackages(a.cfg.DataDir, mgr), Supervisor: sup}, nil
}

// cleanHost undoes what unit holds on the host through its claims: its
// daemons stopped, the files it wrote removed (those changed since are
// kept), its package claims released. It runs before the unit's directory
// is removed, which holds the record of its files; it reports whether all
// went, and the directory must otherwise stay, for a later try. Once all
// went, the machine's gate forgets the unit's claims.
func (a *Agent) cleanHost(ctx context.Context, unit string) (ok bool) {
	h := a.host
	if h == nil {
		return true
	}
	defer func() {
		if ok {
			a.gate.forget(unit)
		}
	}()
	var errs []error
	if err := h.Supervisor.StopAll(unit); err != nil {
		errs = append(errs, fmt.Errorf("stop daemons: %w", err))
	}
	if _, err := hostexec.RemoveFiles(a.unitDir(unit)); err != nil {
		errs = append(errs, fmt.Errorf("remove files: %w", err))
	}
	if claimed, err := h.Packages.Claimed(unit); err != nil {
		errs = append(errs, fmt.Errorf("package claims: %w", err))
	} else if len(claimed) > 0 {
		names := make([]string, 0, len(claimed))
		for n := range claimed {
			names = append(names, n)
		}
		if _, err := h.Packages.Release(ctx, unit, names); err != nil {
			errs = append(errs, fmt.Errorf("release packages: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		a.logger.Warn("cannot undo the unit's host claims: its files stay for a later try", "unit", unit, "error", err)
		return false
	}
	return true
}

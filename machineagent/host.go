package machineagent

import (
	"fmt"
	"path/filepath"

	"github.com/lifelinehq/lifeline/hostexec"
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
// others; its Run watches them in the agent's wait group.

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

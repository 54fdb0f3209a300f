package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/lifelinehq/lifeline/controller/gate"
	"github.com/lifelinehq/lifeline/state"
)

// rolloutFlags are the controller's flags about revisions and rollouts.
type rolloutFlags struct {
	gates           []string
	revisionHistory int
}

func (r *rolloutFlags) add(fl *pflag.FlagSet) {
	// An array, not a slice: a gate's command may hold commas.
	fl.StringArrayVar(&r.gates, "rollout-gate", nil,
		"a gate a service's rollout policy may name (ctl set-rollout --gate NAME), asked before each unit moves: NAME=COMMAND (run by /bin/sh on this host, the question as JSON on stdin, the answer on stdout) or NAME=https://URL (POSTed); repeatable")
	fl.IntVar(&r.revisionHistory, "revision-history", state.DefaultRevisionHistory,
		fmt.Sprintf("how many revisions of each service's spec are kept, at least (1 to %d)", state.MaxRevisionHistory))
}

// parse checks the flags and makes the gates.
func (r *rolloutFlags) parse() ([]gate.Gate, error) {
	if r.revisionHistory < 1 || r.revisionHistory > state.MaxRevisionHistory {
		return nil, fmt.Errorf("--revision-history %d: want 1 to %d", r.revisionHistory, state.MaxRevisionHistory)
	}
	var gates []gate.Gate
	seen := map[string]bool{}
	for _, spec := range r.gates {
		g, err := gate.Parse(spec, gate.Config{})
		if err != nil {
			return nil, fmt.Errorf("--rollout-gate: %w", err)
		}
		if seen[g.Name()] {
			return nil, fmt.Errorf("--rollout-gate: gate %q given twice", g.Name())
		}
		seen[g.Name()] = true
		gates = append(gates, g)
	}
	return gates, nil
}

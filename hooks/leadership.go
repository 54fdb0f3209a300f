package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// LeadershipContext is the Context of a hook or action whose unit can
// ask about its service's leadership, as Juju's is-leader, leader-get
// and leader-set do. A unit agent's hooks and actions have one.
type LeadershipContext interface {
	Context
	// IsLeader says whether the unit leads its service now.
	IsLeader(ctx context.Context) (bool, error)
	// LeaderSettings returns the service's leader settings.
	LeaderSettings(ctx context.Context) (map[string]string, error)
	// SetLeaderSettings writes the leader settings at once (not at the
	// hook's end, as Juju does): set's empty values delete their keys.
	// It returns ErrNotLeader when the unit does not lead.
	SetLeaderSettings(ctx context.Context, set map[string]string) error
}

// ErrNotLeader is what SetLeaderSettings returns for a unit that does not
// lead: leader-set prints it as Juju does.
var ErrNotLeader = errors.New("cannot write leadership settings: cannot write settings: not the leader")

var errNoLeadership = errors.New("this unit's agent cannot tell its leadership here")

// leadershipTools returns is-leader, leader-get and leader-set.
func leadershipTools() map[string]tool {
	return map[string]tool{
		"is-leader": {
			usage: "[--format=text|json]",
			doc: `Prints True when this unit is its service's leader, else False (true or
false in json). The leader is the unit the controller elected among the
service's alive units whose machine agent is present; it stays leader
while both hold.`,
			flags: []string{"format"},
			run:   (*call).isLeader,
		},
		"leader-get": {
			usage: "[--format=text|json] [KEY|-]",
			doc: `Prints the service's leader settings: KEY's value, or all of them when
KEY is "-" or absent ("key: value" lines, sorted, in text). A key that is
not set prints nothing (null in json).`,
			flags: []string{"format"},
			run:   (*call).leaderGet,
		},
		"leader-set": {
			usage: "KEY=VALUE...",
			doc: `Writes the service's leader settings at once; an empty VALUE deletes
KEY. Only the leader may: any other unit is refused. The other units run
leader-settings-changed. The settings hold at most 64 KiB.`,
			run: (*call).leaderSet,
		},
	}
}

func (c *call) leadership() (LeadershipContext, error) {
	lc, ok := c.hc.(LeadershipContext)
	if !ok {
		return nil, errNoLeadership
	}
	return lc, nil
}

func (c *call) isLeader(ctx context.Context) error {
	if err := c.want(0, 0); err != nil {
		return err
	}
	lc, err := c.leadership()
	if err != nil {
		return err
	}
	leads, err := lc.IsLeader(ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(leads)
	}
	if leads {
		fmt.Fprintln(c.out, "True")
	} else {
		fmt.Fprintln(c.out, "False")
	}
	return nil
}

func (c *call) leaderGet(ctx context.Context) error {
	if err := c.want(0, 1); err != nil {
		return err
	}
	lc, err := c.leadership()
	if err != nil {
		return err
	}
	m, err := lc.LeaderSettings(ctx)
	if err != nil {
		return err
	}
	key := ""
	if len(c.args) == 1 && c.args[0] != "-" {
		key = c.args[0]
	}
	return c.printMap(m, key)
}

func (c *call) leaderSet(ctx context.Context) error {
	if err := c.want(1, -1); err != nil {
		return err
	}
	set := map[string]string{}
	for _, a := range c.args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return usagef("expected KEY=VALUE, got %q", a)
		}
		set[k] = v
	}
	lc, err := c.leadership()
	if err != nil {
		return err
	}
	return lc.SetLeaderSettings(ctx, set)
}

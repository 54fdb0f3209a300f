package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/state"
)

// operationFlags are the controller's flags about operations.
type operationFlags struct {
	taskLostAfter time.Duration
	retention     string
	approvalTTL   time.Duration
}

func (o *operationFlags) add(fl *pflag.FlagSet) {
	fl.DurationVar(&o.taskLostAfter, "task-lost-after", controller.DefaultTaskLostAfter,
		"how long a machine running tasks may go without a heartbeat before the leader marks its tasks lost (resumable)")
	fl.StringVar(&o.retention, "operation-retention", "14d",
		"how long finished operations and their tasks are kept, as an age (14d, 336h); the leader prunes older ones")
	fl.DurationVar(&o.approvalTTL, "approval-ttl", state.DefaultApprovalTTL,
		"how long an operation awaits approval, and then execution once approved, before it expires")
}

func (o *operationFlags) validate() error {
	if o.taskLostAfter <= 0 {
		return fmt.Errorf("--task-lost-after %s: want more than 0", o.taskLostAfter)
	}
	if o.approvalTTL <= 0 {
		return fmt.Errorf("--approval-ttl %s: want more than 0", o.approvalTTL)
	}
	_, err := parseAge("--operation-retention", o.retention)
	return err
}

// parseAge parses an age as --audit-retention takes one: days ("14d") or
// a Go duration ("336h"), more than 0.
func parseAge(flag, v string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(strings.TrimSpace(v), "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("%s %q: want an age such as 14d or 336h", flag, v)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(v)); err != nil {
			return 0, fmt.Errorf("%s %q: want an age such as 14d or 336h", flag, v)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s %q: want more than 0", flag, v)
	}
	return d, nil
}

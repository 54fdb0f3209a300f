package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func refreshCommand(e *env) *cobra.Command {
	var path string
	var settings []string
	var switchCharm bool
	cmd := &cobra.Command{
		Use:   "refresh SERVICE --path CHARM_DIR",
		Short: "Move a service to a new revision of its charm",
		Long: `Upload the charm in CHARM_DIR and make it the charm of SERVICE: a new
revision of the service's spec, which its units move to as its rollout
policy allows (ctl set-rollout), each running the charm's upgrade-charm
hook with the new charm in place, then config-changed.

The configuration is carried over: options the new charm lacks are dropped,
those it adds take their defaults, and a value never set (still the old
charm's default) takes the new default. A value set on the service that the
new option's type refuses is refused by name: give it with
--service-config KEY=VALUE (repeatable), which sets options of the new
charm with the refresh. A refresh to the charm the service runs already is
refused, as is one whose charm lacks an endpoint a relation of the service
uses, and one to a charm of another name without --switch.

ctl rollback returns to the revision before, charm and configuration
together.

Example:
  ctl refresh kv --path examples/charms/kv --service-config port=9000`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkService(cmd, args[0]); err != nil {
				return err
			}
			if path == "" {
				return usagef(cmd, "--path: give the directory of the charm to refresh to")
			}
			if err := e.configFlagNotASetting(); err != nil {
				return usagef(cmd, "%v", err)
			}
			set, err := charm.ParseKeyValues(settings)
			if err != nil {
				return usagef(cmd, "--service-config: %v", err)
			}
			return refresh(cmd, e, args[0], path, set, switchCharm)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&path, "path", "", "the `CHARM_DIR` of the charm to refresh to")
	fl.StringArrayVar(&settings, "service-config", nil, "a `KEY=VALUE` setting of the new charm (repeatable; --config is the client config)")
	fl.BoolVar(&switchCharm, "switch", false, "allow a charm of another name than the service's")
	return cmd
}

func refresh(cmd *cobra.Command, e *env, service, dir string, set map[string]string, switchCharm bool) error {
	c, rec, err := packAndUpload(cmd.Context(), e, dir)
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := callContext(cmd.Context())
	defer cancel()
	resp, err := c.op.RefreshService(ctx, &pb.RefreshServiceRequest{
		Service: service, Charm: rec.Name, Revision: rec.Revision, Config: set, SwitchCharm: switchCharm,
	})
	if err != nil {
		return c.check(err)
	}
	fmt.Fprintf(e.stdout, "refreshed %s to charm %s-%d: revision %d (%s)\n",
		service, rec.Name, rec.Revision, resp.Revision.GetNumber(), changesText(resp.Revision.GetChanges(), 0))
	if len(resp.Dropped) > 0 {
		fmt.Fprintf(e.stdout, "dropped options the new charm lacks: %s\n", strings.Join(resp.Dropped, ", "))
	}
	if len(resp.Defaulted) > 0 {
		fmt.Fprintf(e.stdout, "new options, at their defaults: %s\n", strings.Join(resp.Defaulted, ", "))
	}
	return nil
}

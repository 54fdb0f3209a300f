package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func dashboardCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "dashboard",
		Short: "Print the dashboard's address and a one-time link that logs you in",
		Long: `Ask the controller for a link that logs this client config's user in to
the dashboard it serves over HTTPS (lifelined controller --dashboard-addr),
and print the dashboard's address and the link. The link works once, within
a minute; opening it sets a session cookie in the browser. The dashboard
shows and does what the user's role allows, each action audited as the
same ctl command.

The link is a secret for that minute: open it yourself, do not share it.
The dashboard's certificate is signed by the model's CA (in the client
config, as for ctl): have the browser trust that CA, or it warns.

Example:
  ctl dashboard
  ctl --config bob.json dashboard`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.DashboardLoginResponse, error) {
				return op.DashboardLogin(ctx, &pb.DashboardLoginRequest{})
			})
			if err != nil {
				return err
			}
			left := time.Until(time.Unix(0, resp.ExpiresUnixNano)).Round(time.Second)
			fmt.Fprintf(e.stdout, "dashboard: %s\nlog in (once, within %s): %s\n", resp.Url, left, resp.LoginUrl)
			return nil
		},
	}
}

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func addControllerCommand(e *env) *cobra.Command {
	var tokenFile string
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "add-controller",
		Short: "Issue a one-time join token for a new controller of the model",
		Long: `Issue a join token with which one more controller joins the model's
controllers, and print the command to start it on its host.

The model's CA key is stored in etcd sealed with a key that only the
controllers hold; the new controller presents the token (once, before it
expires) to a running controller, over TLS checked against the model's CA,
and receives that key. The token is written to --token-file (mode 0600):
copy it to the new controller's host privately. The controller reads it from
the file (or from stdin, with --join-file -), never from its command
line, and needs it only on its first start.

Example:
  ctl add-controller --token-file controller.token
  ctl add-controller --token-file controller.token --expires 10m`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tokenFile == "" {
				return usagef(cmd, "--token-file is required: the token is a secret, written to a file of mode 0600")
			}
			if validFor < time.Second || validFor > 24*time.Hour {
				return usagef(cmd, "--expires %s: want from 1s to 24h", validFor)
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.AddController(ctx, &pb.AddControllerRequest{ValidForMs: validFor.Milliseconds()})
			if err != nil {
				return c.check(err)
			}
			if err := pki.WriteFileAtomic(tokenFile, []byte(resp.Token+"\n"), 0o600); err != nil {
				return err
			}
			expires := time.Unix(0, resp.ExpiresUnixNano).UTC().Format(time.RFC3339)
			fmt.Fprintf(e.stdout, "wrote a controller join token to %s: it works once, until %s\n", tokenFile, expires)
			fmt.Fprintf(e.stdout, "copy it to the new controller's host and start the controller there with:\n")
			fmt.Fprintf(e.stdout, "  lifelined controller --join-file %s --data-dir DIR --api-addr ADDR --advertise ADDR \\\n", tokenFile)
			fmt.Fprintf(e.stdout, "    --etcd-endpoints %s --namespace %s", strings.Join(resp.EtcdEndpoints, ","), resp.Namespace)
			if resp.EtcdTls {
				fmt.Fprintf(e.stdout, " \\\n    --etcd-cacert FILE --etcd-cert FILE --etcd-key FILE")
			}
			fmt.Fprintln(e.stdout)
			return nil
		},
	}
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "`FILE` to write the token to (mode 0600; required)")
	cmd.Flags().DurationVar(&validFor, "expires", time.Hour, "how long the token may be used, from 1s to 24h")
	return cmd
}

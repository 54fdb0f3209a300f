package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/version"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// versionDoc is what ctl version --format json or yaml writes: the
// client's build, and the controller's when it answered.
type versionDoc struct {
	Client     version.Info       `json:"client" yaml:"client"`
	Controller *controllerVersion `json:"controller,omitempty" yaml:"controller,omitempty"`
}

// controllerVersion is the answering controller's build and its id.
type controllerVersion struct {
	version.Info `yaml:",inline"`
	ID           string `json:"id" yaml:"id"`
}

func versionCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the versions of ctl and of the controller",
		Long: `Print what ctl is (its version, the commit it was built from, when, and with
which Go) and what the controller that answers is. When no controller
answers, ctl's own version is printed and ctl says why on stderr and exits
1. ctl --version prints ctl's alone, without calling anyone.

Example:
  ctl version
  ctl version --format json`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			doc := versionDoc{Client: version.Get()}
			resp, callErr := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.VersionResponse, error) {
				return op.Version(ctx, &pb.VersionRequest{})
			})
			if callErr == nil {
				doc.Controller = &controllerVersion{Info: version.Info{Version: resp.Version, Commit: resp.Commit, Date: resp.BuildDate,
					GoVersion: resp.GoVersion, Platform: resp.Platform}, ID: resp.Controller}
			}
			if format != formatTabular {
				if err := writeDocument(e.stdout, doc, format); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "client:     %s\n", doc.Client)
				if c := doc.Controller; c != nil {
					fmt.Fprintf(e.stdout, "controller: %s on %s\n", c.Info, c.ID)
				}
			}
			return callErr
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

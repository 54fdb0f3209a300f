package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/manifest"
)

func exportCommand(e *env) *cobra.Command {
	var out, name, charmDir string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the model as a manifest",
		Long: `Write the model as a manifest (docs/MANIFESTS.md) on stdout, or in -o FILE:
each alive service with its charm's directory, its number of units (none
for a subordinate) and the options it sets away from its charm's defaults,
and each relation between two services. Peer relations come with their
services, machines with their units: neither is written.

The model keeps a service's charm as an archive, not the directory it was
packed from: a service's charm is written as --charm-dir joined with the
charm's name (./charms/kv for kv). Planned with those directories against
the same model, the manifest has no actions.

Example:
  ctl export
  ctl export -o model.yaml --charm-dir examples/charms --name shop`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			dir := "."
			if out != "" {
				dir = filepath.Dir(out)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), planTimeout)
			defer cancel()
			data, err := manifest.Export(ctx, c.op, manifest.ExportOptions{Name: name, CharmDir: charmDir, Dir: dir})
			if err != nil {
				return c.check(err)
			}
			if out == "" {
				_, err := e.stdout.Write(data)
				return err
			}
			if err := os.WriteFile(out, data, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote the model as a manifest in %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "write the manifest in `FILE`")
	cmd.Flags().StringVar(&name, "name", "export", "the manifest's `NAME`: the owner of what applying it creates")
	cmd.Flags().StringVar(&charmDir, "charm-dir", "./charms", "the `DIR` holding the charms' directories, each named as its charm")
	return cmd
}

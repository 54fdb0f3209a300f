package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// uploadTimeout bounds a charm upload: up to 32 MiB.
const uploadTimeout = 2 * time.Minute

// uploadChunk is the size of each chunk of an upload.
const uploadChunk = 1 << 20

type deployFlags struct {
	numUnits int
	to       string
	force    bool
	settings []string
	strict   bool
}

func deployCommand(e *env) *cobra.Command {
	var f deployFlags
	cmd := &cobra.Command{
		Use:   "deploy CHARM_DIR [SERVICE]",
		Short: "Deploy a charm as a service",
		Long: `Deploy the charm in CHARM_DIR as a service (named after the charm unless
SERVICE is given), with -n units (1 by default) on new machines, or all on
machine --to.

A unit placed with --to is refused when its charm's static host claims
(ports, files at a fixed path, packages at a fixed version) conflict with
those of a unit already on the machine. --force places it anyway; the
machine agent then holds one of the two back.

The charm is validated and packed here, uploaded (the same charm again keeps
its revision), and deployed at the revision the controller stored.
--service-config KEY=VALUE settings (repeatable) are typed by the charm's
config.yaml. (Juju's deploy calls them --config; here --config, as for every
command, names ctl's client config file, so the service's settings have a
flag of their own.)

A subordinate charm is deployed with no units: its units come with the
principals it is related to (ctl add-relation), so -n is refused for it.

What a charm written for Juju declares that Lifeline does not use (a
metadata.yaml key such as maintainer, series, extra-bindings or resources;
an endpoint's optional; files such as metrics.yaml) is printed as one
warning each on stderr; --strict refuses the charm instead.

Example:
  ctl deploy examples/charms/logger
  ctl deploy examples/charms/kv cache -n 2 --service-config port=9000
  ctl deploy examples/charms/app web --to 0
  ctl deploy --strict examples/charms/logger syslog`,
		Args: argsRange(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.numUnits < 0 {
				return usagef(cmd, "-n %d: want 0 or more units", f.numUnits)
			}
			if f.force && f.to == "" {
				return usagef(cmd, "--force places units on machine --to: give --to")
			}
			if err := e.configFlagNotASetting(); err != nil {
				return usagef(cmd, "%v", err)
			}
			settings, err := charm.ParseKeyValues(f.settings)
			if err != nil {
				return usagef(cmd, "--service-config: %v", err)
			}
			service := ""
			if len(args) == 2 {
				service = args[1]
			}
			return deploy(cmd, e, args[0], service, f, settings)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.numUnits, "num-units", "n", 1, "`N` units to add (subordinates take none)")
	fl.StringVar(&f.to, "to", "", "put every unit on `MACHINE` (default: a new machine each)")
	fl.BoolVar(&f.force, "force", false, "place the units on --to even when their host claims conflict with a unit's there")
	fl.BoolVar(&f.strict, "strict", false, "refuse a charm that declares what Lifeline does not use, rather than warn")
	fl.StringArrayVar(&f.settings, "service-config", nil, "a `KEY=VALUE` setting of the service (repeatable; --config is the client config)")
	return cmd
}

func deploy(cmd *cobra.Command, e *env, dir, service string, f deployFlags, settings map[string]string) error {
	// The controller finds what the charm declares that Lifeline does
	// not use: it refuses the charm under --strict, else packAndUpload
	// prints its warnings. --strict refuses here first, before packing
	// and connecting, when the directory says as much.
	if warnings, err := charm.Warnings(dir); f.strict && err == nil && len(warnings) > 0 {
		return fmt.Errorf("--strict: charm %s declares what Lifeline does not use: %s", dir, strings.Join(warnings, "; "))
	}
	c, rec, err := packAndUploadStrict(cmd.Context(), e, dir, f.strict)
	if err != nil {
		return err
	}
	defer c.close()

	n := f.numUnits
	if rec.Subordinate {
		if cmd.Flags().Changed("num-units") && n > 0 {
			return usagef(cmd, "charm %s is a subordinate: its units come with the principals it is related to, so deploy it without -n and relate it (ctl add-relation)", rec.Name)
		}
		n = 0
	}
	ctx, cancel := callContext(cmd.Context())
	defer cancel()
	resp, err := c.op.Deploy(ctx, &pb.DeployRequest{
		Charm: rec.Name, Revision: rec.Revision, Service: service,
		NumUnits: int32(n), To: f.to, Force: f.force, Config: settings,
	})
	if err != nil {
		return c.check(err)
	}
	svc := resp.Service
	switch {
	case svc.Subordinate:
		fmt.Fprintf(e.stdout, "deployed subordinate service %s: relate it to a principal service for it to have units\n", svc.Name)
	case len(resp.Units) == 0:
		fmt.Fprintf(e.stdout, "deployed service %s with no units\n", svc.Name)
	default:
		fmt.Fprintf(e.stdout, "deployed service %s with %s: %s\n", svc.Name, plural(len(resp.Units), "unit"), placements(resp.Units))
	}
	return nil
}

// uploadCharm sends a packed charm, header first, then 1 MiB chunks.
// packAndUpload packs the charm directory dir, connects, uploads the
// charm and says so: deploy and refresh begin alike. The caller closes
// the client.
func packAndUpload(ctx context.Context, e *env, dir string) (*client, *pb.Charm, error) {
	return packAndUploadStrict(ctx, e, dir, false)
}

// packAndUploadStrict packs the charm in dir and uploads it, printing the
// controller's warnings of what in it Lifeline does not use, one a line
// on stderr; strict makes the controller refuse such a charm instead.
func packAndUploadStrict(ctx context.Context, e *env, dir string, strict bool) (*client, *pb.Charm, error) {
	var buf bytes.Buffer
	info, err := charm.Pack(dir, &buf)
	if err != nil {
		return nil, nil, err // it names the directory
	}
	c, err := e.connect()
	if err != nil {
		return nil, nil, err
	}
	resp, err := uploadCharmStrict(ctx, c, buf.Bytes(), info.SHA256, strict)
	if err != nil {
		err = c.check(err)
		c.close()
		return nil, nil, err
	}
	rec := resp.Charm
	for _, w := range resp.Warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	fmt.Fprintf(e.stdout, "uploaded charm %s revision %d (%s)\n", rec.Name, rec.Revision, sizeText(rec.Size))
	return c, rec, nil
}

// uploadCharmStrict uploads a packed charm and returns the controller's
// answer: the charm's record and its warnings.
func uploadCharmStrict(ctx context.Context, c *client, data []byte, sha string, strict bool) (*pb.UploadCharmResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	stream, err := c.op.UploadCharm(ctx)
	if err != nil {
		return nil, err
	}
	header := &pb.UploadCharmHeader{Size: int64(len(data)), Sha256: sha, Strict: strict}
	if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: header}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	for off := 0; off < len(data); off += uploadChunk {
		end := min(off+uploadChunk, len(data))
		err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: data[off:end]}})
		if errors.Is(err, io.EOF) {
			break // the server ended the stream: CloseAndRecv says why
		}
		if err != nil {
			return nil, err
		}
	}
	return stream.CloseAndRecv()
}

func sizeText(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d bytes", n)
	}
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// placements lists units with their machines: "kv/0 on machine 0, ...".
func placements(units []*pb.Unit) string {
	parts := make([]string, len(units))
	for i, u := range units {
		parts[i] = u.Name
		if u.MachineId != "" {
			parts[i] += " on machine " + u.MachineId
		}
	}
	return strings.Join(parts, ", ")
}

func addUnitCommand(e *env) *cobra.Command {
	var n int
	var to string
	var force bool
	cmd := &cobra.Command{
		Use:   "add-unit SERVICE",
		Short: "Add units to a service",
		Long: `Add -n units (1 by default) to a service, each on a new machine, or all on
machine --to. Subordinate services get units by relation, not this way.

A unit placed with --to is refused when its charm's static host claims
(ports, files at a fixed path, packages at a fixed version) conflict with
those of a unit already on the machine, or of another unit added with it.
--force places it anyway; the machine agent then holds one of them back.

Example:
  ctl add-unit kv
  ctl add-unit app --to 1`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return usagef(cmd, "-n %d: want at least 1 unit", n)
			}
			if force && to == "" {
				return usagef(cmd, "--force places units on machine --to: give --to")
			}
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.AddUnits(ctx, &pb.AddUnitsRequest{Service: args[0], NumUnits: int32(n), To: to, Force: force})
			if err != nil {
				return c.check(err)
			}
			fmt.Fprintf(e.stdout, "added %s\n", placements(resp.Units))
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "num-units", "n", 1, "`N` units to add")
	cmd.Flags().StringVar(&to, "to", "", "put the units on `MACHINE` (default: a new machine each)")
	cmd.Flags().BoolVar(&force, "force", false, "place the units on --to even when their host claims conflict with a unit's there")
	return cmd
}

func addRelationCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "add-relation SERVICE[:ENDPOINT] SERVICE[:ENDPOINT]",
		// Juju 3's names, for operators coming from Juju.
		Aliases: []string{"integrate", "relate"},
		Short:   "Relate two services",
		Long: `Relate two services, so that their units exchange settings through the
relation's hooks. Name the endpoints when the services could be related in
more than one way.

Relating a subordinate service to a principal over a container-scoped
endpoint gives each principal unit a subordinate unit on its machine.

Example:
  ctl add-relation app logger
  ctl add-relation web:db kv:server`,
		Args: argsRange(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.connect()
			if err != nil {
				return err
			}
			defer c.close()
			ctx, cancel := callContext(cmd.Context())
			defer cancel()
			resp, err := c.op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: args})
			if err != nil {
				return c.check(err)
			}
			fmt.Fprintf(e.stdout, "added relation %d: %s\n", resp.Relation.GetId(), resp.Relation.GetKey())
			return nil
		},
	}
}

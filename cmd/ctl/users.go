package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// parseRole is a role named on the command line.
func parseRole(cmd *cobra.Command, name string) (pb.UserRole, error) {
	for _, r := range []pb.UserRole{pb.UserRole_USER_ROLE_VIEWER, pb.UserRole_USER_ROLE_OPERATOR, pb.UserRole_USER_ROLE_ADMIN} {
		if roleName(r) == name {
			return r, nil
		}
	}
	return 0, usagef(cmd, "unknown role %q: want viewer, operator or admin", name)
}

// roleName is a role as ctl names it: viewer, operator, admin (as the
// controller does in its messages).
func roleName(r pb.UserRole) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "USER_ROLE_"))
}

// maxRegistrationTime is the longest a registration token may work: the
// controller refuses more, and ctl says so before it asks.
const maxRegistrationTime = 30 * 24 * time.Hour

func checkFormat(cmd *cobra.Command, format string) error {
	switch format {
	case formatTabular, formatJSON, formatYAML:
		return nil
	}
	return usagef(cmd, "--format %q: want tabular, json or yaml", format)
}

// unary connects, makes one call with callTimeout, and reports its error
// as ctl does.
func unary[T any](ctx context.Context, e *env, call func(context.Context, pb.OperatorServiceClient) (T, error)) (T, error) {
	var zero T
	c, err := e.connect()
	if err != nil {
		return zero, err
	}
	defer c.close()
	ctx, cancel := callContext(ctx)
	defer cancel()
	resp, err := call(ctx, c.op)
	if err != nil {
		return zero, c.check(err)
	}
	return resp, nil
}

func addUserCommand(e *env) *cobra.Command {
	var role, tokenFile string
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "add-user NAME",
		Short: "Add a user and print its registration token",
		Long: `Add a user with a role (viewer, operator or admin; viewer by default) and print
the one-time registration token to hand to them, and the command they run
with it. The token holds the controllers' addresses, the fingerprint of
their CA and a one-time secret; it works once, until it expires. It holds
no credential: ctl register makes the user's own. A user who does not
register in time is removed. With --token-file the token is written to a
file (mode 0600) rather than printed.

Example:
  ctl add-user alice --role operator --expires 2h
  ctl add-user bob --token-file bob.token`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRole(cmd, role)
			if err != nil {
				return err
			}
			if err := names.CheckUser(args[0]); err != nil {
				return usagef(cmd, "%v", err)
			}
			if expires <= 0 || expires > maxRegistrationTime {
				return usagef(cmd, "--expires %s: want more than 0 and at most %s", expires, maxRegistrationTime)
			}
			cfg, err := e.readConfig()
			if err != nil {
				return err
			}
			fp, err := pki.CAFingerprint([]byte(cfg.CACert))
			if err != nil {
				return err
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.AddUserResponse, error) {
				return op.AddUser(ctx, &pb.AddUserRequest{Name: args[0], Role: r, ExpiresMs: expires.Milliseconds()})
			})
			if err != nil {
				return err
			}
			addrs := resp.Controllers
			if len(addrs) == 0 {
				addrs = cfg.Controllers
			}
			token, err := pki.EncodeRegistrationToken(pki.RegistrationToken{Controllers: addrs, CAFingerprint: fp, User: args[0], Secret: resp.Secret})
			if err != nil {
				return err
			}
			at := time.Unix(0, resp.ExpiresUnixNano).Local().Format(time.RFC3339)
			if tokenFile != "" {
				if err := pki.WriteFileAtomic(tokenFile, []byte(token+"\n"), 0o600); err != nil {
					return fmt.Errorf("user %s is added, but its token cannot be written (remove the user and add it again): %w", args[0], err)
				}
				fmt.Fprintf(e.stdout, "added user %s (%s); wrote its registration token to %s: it works once, until %s\n", args[0], roleName(r), tokenFile, at)
				fmt.Fprintf(e.stdout, "hand it over privately; the user runs:\n\n  ctl register - --config FILE < %s\n", tokenFile)
				return nil
			}
			fmt.Fprintf(e.stdout, "added user %s (%s); its registration token works once, until %s:\n\n%s\n\n", args[0], roleName(r), at, token)
			fmt.Fprintf(e.stdout, "hand it over; the user runs (reading the token from stdin keeps it out of shell history):\n\n  ctl register - --config FILE\n")
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "viewer", "viewer, operator or admin")
	cmd.Flags().DurationVar(&expires, "expires", 24*time.Hour, "how long the registration token works (at most 720h)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "write the token to `FILE` (mode 0600) instead of printing it")
	return cmd
}

func registerCommand(e *env) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "register TOKEN|-",
		Short: "Register as a user with the token ctl add-user printed",
		Long: `Register as the user a registration token names: check that the controller's
CA is the one the token pins, make a credential of your own (its secret
never leaves this machine: only its hash is sent), bind it with the token's
one-time secret, and write your client config (mode 0600) to --config, or
$LIFELINE_CONFIG, or the default. An existing client config there is not
overwritten. With - the token is read from stdin, which keeps it out of
the shell's history. --name NAME keeps the client config under that name
in ctl's store (see ctl controllers) and makes it the current controller.

Example:
  ctl register - --config bob.json < bob.token`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw := args[0]
			if raw == "-" {
				data, err := io.ReadAll(io.LimitReader(e.stdin, 64<<10))
				if err != nil {
					return fmt.Errorf("read the token from stdin: %w", err)
				}
				raw = string(data)
			}
			tok, err := pki.DecodeRegistrationToken(raw)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			var store clientStore
			if cmd.Flags().Changed("name") {
				if store, err = e.useNamedController(name); err != nil {
					return usagef(cmd, "--name: %v", err)
				}
			}
			path, err := e.clientConfigPath()
			if err != nil {
				return err
			}
			if _, err := os.Stat(path); err == nil {
				return fmt.Errorf("a client config is already at %s: register with --name or --config naming another", path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := register(cmd.Context(), e, tok, path); err != nil {
				return err
			}
			if name == "" {
				return nil
			}
			if err := store.setCurrent(name); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "current controller: %s\n", name)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "keep the client config under this `NAME` in ctl's store and make it current")
	return cmd
}

// register binds a new credential for tok's user and writes its client
// config at path.
func register(ctx context.Context, e *env, tok pki.RegistrationToken, path string) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	var caPEM []byte
	var errs []error
	for _, addr := range tok.Controllers {
		ca, err := apiclient.FetchCA(ctx, addr, tok.CAFingerprint)
		if err == nil {
			caPEM = ca
			break
		}
		errs = append(errs, fmt.Errorf("%s: %s", addr, errorText(err)))
		if errors.Is(err, apiclient.ErrCAMismatch) {
			// Someone else answers there: the secret goes nowhere.
			return fmt.Errorf("the controller's CA is not the one the token pins: not registering (%v)", errors.Join(errs...))
		}
	}
	if caPEM == nil {
		return fmt.Errorf("cannot reach a controller to register with: %v", errors.Join(errs...))
	}
	cred, hash, err := pki.NewCredential(names.UserTag(tok.User))
	if err != nil {
		return err
	}
	conn, err := apiclient.Dial(apiclient.Config{Addresses: tok.Controllers, CACert: caPEM})
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := pb.NewRegistrationServiceClient(conn).Register(ctx, &pb.RegisterRequest{User: tok.User, Secret: tok.Secret, CredentialHash: hash})
	if err != nil {
		return fmt.Errorf("register %s: %s", tok.User, errorText(err))
	}
	addrs := resp.Controllers
	if len(addrs) == 0 {
		addrs = tok.Controllers
	}
	if err := pki.WriteClientConfig(path, pki.ClientConfig{Controllers: addrs, CACert: string(caPEM), Tag: cred.Tag, Secret: cred.Secret}); err != nil {
		return fmt.Errorf("registered, but cannot write the client config (an admin must remove the user and add it again): %w", err)
	}
	fmt.Fprintf(e.stdout, "registered as %s (%s); client config written to %s\n", tok.User, roleName(resp.User.GetRole()), path)
	return nil
}

// userDoc is a user as ctl users shows it in json and yaml.
type userDoc struct {
	Name      string `json:"name" yaml:"name"`
	Role      string `json:"role" yaml:"role"`
	CreatedBy string `json:"created-by" yaml:"created-by"`
	Created   string `json:"created" yaml:"created"`
	// Registered is when the user registered; empty until then, and
	// RegistrationExpires says until when it can.
	Registered          string `json:"registered,omitempty" yaml:"registered,omitempty"`
	RegistrationExpires string `json:"registration-expires,omitempty" yaml:"registration-expires,omitempty"`
}

func stamp(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}

func usersCommand(e *env) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "users",
		Short: "List the users, their roles, and who has yet to register",
		Long: `List the users: each one's role, who added it and when it registered (or
until when it can).

Example:
  ctl users
  ctl users --format json`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(cmd, format); err != nil {
				return err
			}
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.ListUsersResponse, error) {
				return op.ListUsers(ctx, &pb.ListUsersRequest{})
			})
			if err != nil {
				return err
			}
			docs := []userDoc{}
			for _, u := range resp.Users {
				docs = append(docs, userDoc{Name: u.User.Name, Role: roleName(u.User.Role), CreatedBy: u.User.CreatedBy,
					Created: stamp(u.User.CreatedUnixNano), Registered: stamp(u.User.RegisteredUnixNano),
					RegistrationExpires: stamp(u.RegistrationExpiresUnixNano)})
			}
			if format != formatTabular {
				return writeDocument(e.stdout, docs, format)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "User\tRole\tCreated by\tRegistered")
			for _, d := range docs {
				reg := d.Registered
				if reg == "" {
					reg = "not yet (token expires " + d.RegistrationExpires + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Name, d.Role, dash(d.CreatedBy), reg)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&format, "format", formatTabular, "tabular, json or yaml")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeDocument writes v as one JSON or YAML document.
func writeDocument(w io.Writer, v any, format string) error {
	if format == formatYAML {
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func removeUserCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-user NAME",
		Short: "Remove a user: its credential stops working at once",
		Long: `Remove a user and revoke its credential at once: its calls are refused and its
open streams (status --watch, audit --follow) end. The last admin cannot be
removed.

Example:
  ctl remove-user alice`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.RemoveUserResponse, error) {
				return op.RemoveUser(ctx, &pb.RemoveUserRequest{Name: args[0]})
			}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "removed user %s\n", args[0])
			return nil
		},
	}
}

func setRoleCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "set-role NAME ROLE",
		Short: "Give a user a role: viewer, operator or admin",
		Long: `Give a user a role: viewer (reads), operator (also changes the model) or admin
(also manages users). It holds from the user's next call. The last admin
cannot be given another role.

Example:
  ctl set-role bob operator`,
		Args: argsRange(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseRole(cmd, args[1])
			if err != nil {
				return err
			}
			if _, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.SetUserRoleResponse, error) {
				return op.SetUserRole(ctx, &pb.SetUserRoleRequest{Name: args[0], Role: r})
			}); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "user %s is %s\n", args[0], roleName(r))
			return nil
		},
	}
}

func whoamiCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Name the user this client config is, its role, and the controller",
		Long: `Name the user whose credential the client config holds, its role, and the
controller that answers.

Example:
  ctl whoami
  ctl --config bob.json whoami`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.WhoAmIResponse, error) {
				return op.WhoAmI(ctx, &pb.WhoAmIRequest{})
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "user %s (%s) on controller %s\n", resp.User.Name, roleName(resp.User.Role), resp.Controller)
			return nil
		},
	}
}

func rotateCredentialCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-credential",
		Short: "Replace this client config's credential by a new one",
		Long: `Make a new credential, have the controller store its hash in place of the
current one's, and write it to the client config: the old credential stops
working at once (and your open streams end).

Example:
  ctl --config bob.json rotate-credential`,
		Args: argsRange(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := e.readConfig()
			if err != nil {
				return err
			}
			cred, hash, err := pki.NewCredential(cfg.Tag)
			if err != nil {
				return err
			}
			path, err := e.clientConfigPath()
			if err != nil {
				return err
			}
			// Written aside first, so that a failure to write after the
			// controller took the new hash loses nothing.
			next := cfg
			next.Secret = cred.Secret
			aside := path + ".new"
			if err := pki.WriteClientConfig(aside, next); err != nil {
				return err
			}
			if _, err := unary(cmd.Context(), e, func(ctx context.Context, op pb.OperatorServiceClient) (*pb.RotateCredentialResponse, error) {
				return op.RotateCredential(ctx, &pb.RotateCredentialRequest{CredentialHash: hash})
			}); err != nil {
				os.Remove(aside)
				return err
			}
			if err := os.Rename(aside, path); err != nil {
				return fmt.Errorf("the controller holds the new credential, which is in %s: move it to %s (%w)", aside, path, err)
			}
			fmt.Fprintf(e.stdout, "replaced the credential of %s in %s\n", strings.TrimPrefix(cfg.Tag, names.KindUser+"-"), path)
			return nil
		},
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifelinehq/lifeline/internal/manifest"
)

// planTimeout bounds reading the model for a plan: its status and each of
// the manifest's services' head revision.
const planTimeout = 2 * time.Minute

// planFileVersion is the version of the plan file's format.
const planFileVersion = 1

// planFile is what plan -o saves: the plan with what it was made from,
// for apply to check that nothing it read has changed since.
type planFile struct {
	Version int `json:"version"`
	// ManifestPath is the manifest's file as given, made absolute.
	ManifestPath string `json:"manifest_path"`
	CreatedAt    string `json:"created_at"`
	*manifest.PlanResult
}

type planFlags struct {
	vars     []string
	varFiles []string
	out      string
	detailed bool
	verbose  bool
	prune    bool
}

func planCommand(e *env) *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan FILE",
		Short: "Show what a manifest would change in the model",
		Long: `Read the manifest FILE (docs/MANIFESTS.md), check it, compare it with the
model, and show each resource as VALID (it matches) or STALE, with the
actions that would make it match: create a service, add or remove units,
set config keys (old → new), refresh a charm, add a relation, add
machines, a plugin's actions. A summary line counts the resources to
create, change and destroy. Nothing is changed.

Everything is checked before the model is read: the dependency graph (a
cycle is named), every template, every resource's config against its
schema (a service's from its charm's config.yaml); every problem is
listed, each naming the resource and the field.

Variables: the file's, then each --var-file (YAML) in order, then each
--var KEY=VALUE (a YAML scalar: 3 is a number, "3" text); later ones win.
A value read from a dependency's state that only applying it makes shows
as (known after apply).

-o saves the plan as JSON: the manifest's digest, the variables, the
model's revision, digests of everything read, the actions.

Exit status: 0 when the plan succeeded, 1 on an error (a manifest's
problems, a refusal), 2 on a usage error; with --detailed-exitcode, 0
when nothing would change and 2 when something would.

--prune also lists what ctl apply --prune would destroy: the services,
relations and machines the manifest owns (created by applying it) that it
no longer names, as "- destroy" actions counted "to destroy".

Example:
  ctl plan examples/manifests/demo.yaml
  ctl plan examples/manifests/demo.yaml --var replicas=3 -o demo.plan`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			vars, err := parseVarFlags(cmd, f)
			if err != nil {
				return err
			}
			return plan(cmd.Context(), e, args[0], vars, f)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.vars, "var", nil, "set the variable `KEY=VALUE` (repeatable; wins over --var-file)")
	fl.StringArrayVar(&f.varFiles, "var-file", nil, "read variables from the YAML `FILE` (repeatable)")
	fl.StringVarP(&f.out, "out", "o", "", "save the plan as JSON in `PLAN`")
	fl.BoolVar(&f.detailed, "detailed-exitcode", false, "exit 0 when nothing would change, 2 when something would")
	fl.BoolVar(&f.verbose, "verbose", false, "tell plugins to say more, and show what they say")
	fl.BoolVar(&f.prune, "prune", false, "show what ctl apply --prune would destroy: what the manifest owns and no longer names")
	return cmd
}

func plan(ctx context.Context, e *env, path string, vars []map[string]any, f planFlags) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	m, err := manifest.Parse(data, filepath.Dir(abs))
	if err != nil {
		return manifestProblems(e.stderr, path, err)
	}
	plugins := &manifest.ExecPlugins{Verbose: f.verbose}
	if f.verbose {
		plugins.Output = e.stderr
	}
	opts := manifest.Options{Vars: vars, Plugins: plugins}
	// Checked first, so that a manifest's problems are listed without a
	// controller.
	checked, err := manifest.Check(ctx, m, opts)
	if err != nil {
		return manifestProblems(e.stderr, path, err)
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.close()
	pctx, cancel := context.WithTimeout(ctx, planTimeout)
	defer cancel()
	p, err := checked.Plan(pctx, c.op)
	if err != nil {
		var me *manifest.Errors
		if errors.As(err, &me) {
			return manifestProblems(e.stderr, path, err)
		}
		return c.check(err)
	}
	if f.prune {
		if p.Destroy, err = checked.PlanPrune(pctx, c.op); err != nil {
			return c.check(err)
		}
	}
	printPlan(e.stdout, p)
	if f.out != "" {
		pf := planFile{Version: planFileVersion, ManifestPath: abs, CreatedAt: time.Now().UTC().Format(time.RFC3339), PlanResult: p}
		b, err := json.MarshalIndent(pf, "", "  ")
		if err != nil {
			return fmt.Errorf("encode the plan: %w", err)
		}
		if err := os.WriteFile(f.out, append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("save the plan: %w", err)
		}
		fmt.Fprintf(e.stdout, "saved the plan in %s\n", f.out)
	}
	if f.detailed && p.Changes() {
		return exitError{code: 2}
	}
	return nil
}

// manifestProblems prints a manifest's problems, one a line, and ends ctl
// with status 1.
func manifestProblems(w io.Writer, path string, err error) error {
	var me *manifest.Errors
	if !errors.As(err, &me) {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(me.List) == 1 {
		fmt.Fprintf(w, "ctl: %s: %s\n", path, me.List[0])
		return exitError{code: 1}
	}
	fmt.Fprintf(w, "ctl: %s has %d problems:\n", path, len(me.List))
	for _, l := range me.List {
		fmt.Fprintf(w, "  %s\n", l)
	}
	return exitError{code: 1}
}

// printPlan shows each resource, its actions, and the summary.
func printPlan(w io.Writer, p *manifest.PlanResult) {
	for _, r := range p.Resources {
		fmt.Fprintf(w, "%s (%s): %s\n", r.Name, r.Type, r.Status)
		for _, a := range r.Actions {
			fmt.Fprintf(w, "  %s %s\n", actionMark(a.Kind), a.Describe())
		}
	}
	if len(p.Destroy) > 0 {
		fmt.Fprintln(w, "pruned (owned by the manifest, no longer in it):")
		for _, a := range p.Destroy {
			fmt.Fprintf(w, "  %s %s\n", actionMark(a.Kind), a.Describe())
		}
	}
	create, change, destroy := p.Summary()
	if !p.Changes() {
		fmt.Fprintln(w, "No changes: the model matches the manifest.")
	}
	fmt.Fprintf(w, "Plan: %d to create, %d to change, %d to destroy.\n", create, change, destroy)
}

// actionMark is the sign before an action: + adds, ~ changes, - removes,
// * runs a plugin's action.
func actionMark(kind string) string {
	switch kind {
	case manifest.ActCreateService, manifest.ActAddUnits, manifest.ActAddRelation, manifest.ActAddMachines:
		return "+"
	case manifest.ActSetConfig, manifest.ActRefreshCharm:
		return "~"
	case manifest.ActRemoveUnits, manifest.ActDestroyService, manifest.ActDestroyRelation, manifest.ActDestroyMachine:
		return "-"
	}
	return "*"
}

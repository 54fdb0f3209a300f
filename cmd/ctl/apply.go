package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/manifest"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

type applyFlags struct {
	planFlags
	prune       bool
	keepGoing   bool
	parallelism int
	timeout     time.Duration
}

func applyCommand(e *env) *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply FILE|PLAN",
		Short: "Make the model match a manifest",
		Long: `Apply the manifest FILE (docs/MANIFESTS.md), or a plan saved by ctl plan -o.

Each resource is applied once its dependencies are, independent ones in
parallel (--parallelism, 10 by default): it is planned again against the
model as it is then, so values known only after a dependency is applied
are rendered; its actions are done through the controller's calls (so the
audit log holds them under your user); a service's actions are done when
its units have settled, as ctl wait says. Then the resource is planned
once more and must be VALID: otherwise apply halts, naming the resource,
its last action and what is still stale. A failure stops what has not
started; --keep-going lets resources that do not depend on it finish.
One line a resource shows the progress.

What apply creates (services, relations, machines) is recorded as owned by
the manifest's name. --prune then destroys what the manifest owns and no
longer names (ctl plan --prune shows it); nothing else is ever destroyed.
It prunes only after a fully successful apply: when any resource failed
(also with --keep-going) nothing is destroyed, and apply says so. The
services and relations go first; their units leave through the life
rules, apply waiting for them (at most --timeout, showing which are left),
and only then are the machines destroyed.

Applying changes the model: a user with the viewer role is refused before
anything is done.

A saved PLAN is refused when anything it read has changed since it was
made: the manifest, its charms, the variables, the services, relations
and machines it compared, a plugin's answer (a plan made against an empty
model is refused once anything it would create exists).

Exit status: 0 when everything is VALID, 1 on an error.

Example:
  ctl apply demo.plan
  ctl apply examples/manifests/demo.yaml --parallelism 4 --prune`,
		Args: argsRange(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.parallelism < 1 {
				return usagef(cmd, "--parallelism %d: want at least 1", f.parallelism)
			}
			vars, err := parseVarFlags(cmd, f.planFlags)
			if err != nil {
				return err
			}
			return apply(cmd.Context(), e, args[0], vars, f, len(f.vars)+len(f.varFiles) > 0)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.vars, "var", nil, "set the variable `KEY=VALUE` (repeatable; wins over --var-file)")
	fl.StringArrayVar(&f.varFiles, "var-file", nil, "read variables from the YAML `FILE` (repeatable)")
	fl.BoolVar(&f.prune, "prune", false, "destroy what the manifest owns and no longer names")
	fl.BoolVar(&f.keepGoing, "keep-going", false, "after a failure, finish the resources that do not depend on it")
	fl.IntVar(&f.parallelism, "parallelism", 10, "apply at most `N` resources at once")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up on a service's units settling after this long")
	fl.BoolVar(&f.verbose, "verbose", false, "tell plugins to say more, and show what they say")
	return cmd
}

// parseVarFlags reads --var-file and --var: the variables beside a
// manifest, in order.
func parseVarFlags(cmd *cobra.Command, f planFlags) ([]map[string]any, error) {
	var vars []map[string]any
	for _, path := range f.varFiles {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, usagef(cmd, "--var-file: %v", err)
		}
		vs, err := manifest.ParseVarFile(data)
		if err != nil {
			return nil, usagef(cmd, "--var-file %s: %v", path, err)
		}
		vars = append(vars, vs)
	}
	flagVars := map[string]any{}
	for _, arg := range f.vars {
		k, v, err := manifest.ParseVar(arg)
		if err != nil {
			return nil, usagef(cmd, "--var %v", err)
		}
		flagVars[k] = v
	}
	return append(vars, flagVars), nil
}

// readPlanFile reads a saved plan; nil when data is not one (a manifest).
func readPlanFile(data []byte) (*planFile, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return nil, nil
	}
	var probe struct {
		Version      int    `json:"version"`
		ManifestPath string `json:"manifest_path"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.ManifestPath == "" {
		return nil, nil
	}
	if probe.Version != planFileVersion {
		return nil, fmt.Errorf("plan file version %d: this ctl reads version %d", probe.Version, planFileVersion)
	}
	pf := &planFile{PlanResult: &manifest.PlanResult{}}
	if err := json.Unmarshal(data, pf); err != nil {
		return nil, fmt.Errorf("read the plan: %w", err)
	}
	return pf, nil
}

func apply(ctx context.Context, e *env, path string, vars []map[string]any, f applyFlags, varsGiven bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	saved, err := readPlanFile(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	mpath := path
	if saved != nil {
		if varsGiven {
			return fmt.Errorf("%s is a saved plan: its variables are its own, --var and --var-file do not apply", path)
		}
		mpath = saved.ManifestPath
		if data, err = os.ReadFile(mpath); err != nil {
			return fmt.Errorf("the plan's manifest: %w", err)
		}
		vars = []map[string]any{saved.Vars}
	}
	abs, err := filepath.Abs(mpath)
	if err != nil {
		return err
	}
	m, err := manifest.Parse(data, filepath.Dir(abs))
	if err != nil {
		return manifestProblems(e.stderr, mpath, err)
	}
	plugins := &manifest.ExecPlugins{Verbose: f.verbose, Output: e.stderr}
	checked, err := manifest.Check(ctx, m, manifest.Options{Vars: vars, Plugins: plugins})
	if err != nil {
		return manifestProblems(e.stderr, mpath, err)
	}
	c, err := e.connect()
	if err != nil {
		return err
	}
	defer c.close()
	if err := mayApply(ctx, c); err != nil {
		return err
	}
	if saved != nil {
		pctx, cancel := context.WithTimeout(ctx, planTimeout)
		now, err := checked.Plan(pctx, c.op)
		cancel()
		if err != nil {
			return planError(e, c, mpath, err)
		}
		if changed := staleInputs(saved.PlanResult, now); len(changed) > 0 {
			return fmt.Errorf("the plan %s is stale: changed since it was made: %s; make a new plan", path, listSome(changed, 10))
		}
	}
	start := time.Now()
	out := &applyOutput{w: e.stdout, start: map[string]time.Time{}}
	x := &ctlExecutor{e: e, c: c, plugins: plugins, manifest: m.Name, timeout: f.timeout}
	_, applyErr := checked.Apply(ctx, manifest.ApplyOptions{Model: c.op, Exec: x, Parallelism: f.parallelism,
		KeepGoing: f.keepGoing, Progress: out.event})
	if applyErr != nil {
		if f.prune {
			fmt.Fprintln(e.stdout, "Prune skipped: the apply did not fully succeed, so nothing was destroyed.")
		}
		var ae *manifest.ApplyError
		if errors.As(applyErr, &ae) {
			return fmt.Errorf("apply halted: %s", ae.Error())
		}
		return c.check(applyErr)
	}
	if f.prune {
		pctx, cancel := context.WithTimeout(ctx, planTimeout)
		p, err := checked.PlanPrune(pctx, c.op)
		cancel()
		if err != nil {
			return c.check(err)
		}
		err = manifest.Prune(ctx, p, manifest.PruneOptions{Model: c.op, Destroy: x.destroy, Timeout: f.timeout,
			Progress: func(line string) { fmt.Fprintln(e.stdout, line) }})
		if err != nil {
			return fmt.Errorf("prune: %w", c.check(err))
		}
	}
	fmt.Fprintf(e.stdout, "Apply complete: %d resources VALID (%s).\n", len(checked.Order), seconds(time.Since(start)))
	return nil
}

// mayApply refuses, before anything is done, a user whose role may not
// change the model: a viewer's apply would otherwise fail at its first
// change, with the resources before it done.
func mayApply(ctx context.Context, c *client) error {
	cctx, cancel := callContext(ctx)
	defer cancel()
	who, err := c.op.WhoAmI(cctx, &pb.WhoAmIRequest{})
	if err != nil {
		return c.check(err)
	}
	if u := who.GetUser(); u.GetRole() < pb.UserRole_USER_ROLE_OPERATOR {
		return status.Errorf(codes.PermissionDenied, "user %s (%s) may not apply a manifest: applying changes the model, which needs the operator role; nothing was changed",
			u.GetName(), roleName(u.GetRole()))
	}
	return nil
}

// planError reports a plan's failure: a manifest's problems listed, or
// the call's error.
func planError(e *env, c *client, path string, err error) error {
	var me *manifest.Errors
	if errors.As(err, &me) {
		return manifestProblems(e.stderr, path, err)
	}
	return c.check(err)
}

// staleInputs compares a saved plan with one made now of the same
// manifest: the names of what changed (the manifest, the variables, and
// each input digest that differs, appeared or went).
func staleInputs(saved, now *manifest.PlanResult) []string {
	var out []string
	if saved.ManifestSHA256 != now.ManifestSHA256 {
		out = append(out, "the manifest")
	}
	a, _ := json.Marshal(saved.Vars)
	b, _ := json.Marshal(now.Vars)
	if !bytes.Equal(a, b) {
		out = append(out, "the variables")
	}
	keys := slices.Sorted(maps.Keys(saved.Inputs))
	for k := range now.Inputs {
		if _, ok := saved.Inputs[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if saved.Inputs[k] != now.Inputs[k] {
			out = append(out, k)
		}
	}
	return out
}

// applyOutput prints apply's progress: one line a resource as it starts
// its actions, and one as it ends.
type applyOutput struct {
	mu    sync.Mutex
	w     io.Writer
	start map[string]time.Time
}

func (o *applyOutput) event(ev manifest.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	head := fmt.Sprintf("%s (%s)", ev.Resource, ev.Type)
	switch ev.Phase {
	case "valid":
		fmt.Fprintf(o.w, "%s: VALID, nothing to do\n", head)
	case "applying":
		o.start[ev.Resource] = time.Now()
		var acts []string
		for _, a := range ev.Actions {
			acts = append(acts, actionMark(a.Kind)+" "+a.Describe())
		}
		fmt.Fprintf(o.w, "%s: applying: %s\n", head, strings.Join(acts, "; "))
	case "applied":
		fmt.Fprintf(o.w, "%s: VALID after its actions (%s)\n", head, seconds(time.Since(o.start[ev.Resource])))
	case "failed":
		fmt.Fprintf(o.w, "%s: FAILED: %v\n", head, ev.Err)
	case "skipped":
		fmt.Fprintf(o.w, "%s: not applied: a resource it depends on failed, or the apply halted\n", head)
	}
}

// ctlExecutor does a resource's actions through the OperatorService, and
// a plugin's through its program.
type ctlExecutor struct {
	e        *env
	c        *client
	plugins  *manifest.ExecPlugins
	manifest string
	timeout  time.Duration
	// uploads serializes charm uploads of one directory.
	mu sync.Mutex
}

func (x *ctlExecutor) Do(ctx context.Context, ch *manifest.Checked, rp *manifest.ResourcePlan) error {
	r := ch.Manifest.Resources[rp.Name]
	settle := false
	for _, a := range rp.Actions {
		var err error
		switch a.Kind {
		case manifest.ActCreateService:
			err = x.createService(ctx, ch, rp, a)
			settle = true
		case manifest.ActRefreshCharm:
			var rec *pb.Charm
			if rec, err = x.upload(ctx, ch.Charms[rp.Name]); err == nil {
				err = x.call(ctx, func(ctx context.Context) error {
					_, err := x.c.op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: a.Service, Charm: rec.Name,
						Revision: rec.Revision, SwitchCharm: a.SwitchCharm})
					return err
				})
			}
			settle = true
		case manifest.ActSetConfig:
			req := &pb.SetConfigRequest{Service: a.Service, Set: map[string]string{}}
			for _, c := range a.Changes {
				if c.New == nil {
					req.Unset = append(req.Unset, c.Key)
				} else {
					req.Set[c.Key] = valueString(c.New)
				}
			}
			err = x.call(ctx, func(ctx context.Context) error { _, err := x.c.op.SetConfig(ctx, req); return err })
			settle = true
		case manifest.ActAddUnits:
			n, _ := a.Count.(int64)
			err = x.call(ctx, func(ctx context.Context) error {
				_, err := x.c.op.AddUnits(ctx, &pb.AddUnitsRequest{Service: a.Service, NumUnits: int32(n), To: a.To})
				return err
			})
			settle = true
		case manifest.ActRemoveUnits:
			for _, u := range a.Units {
				if err = x.call(ctx, func(ctx context.Context) error {
					_, err := x.c.op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: u})
					return err
				}); err != nil {
					break
				}
			}
			settle = true
		case manifest.ActAddRelation:
			var eps []string
			for _, ep := range a.Endpoints {
				s, _ := ep.(string)
				eps = append(eps, s)
			}
			err = x.call(ctx, func(ctx context.Context) error {
				resp, err := x.c.op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: eps})
				if err != nil {
					return err
				}
				return x.claim(ctx, &pb.OwnedEntity{Kind: "relation", Id: strconv.FormatInt(resp.Relation.Id, 10), Resource: rp.Name})
			})
			for _, s := range eps {
				svc, _, _ := strings.Cut(s, ":")
				if other, ok := ch.Manifest.Resources[svc]; ok && other.Type == manifest.TypeService {
					settle = true
				}
			}
		case manifest.ActAddMachines:
			n, _ := a.Count.(int64)
			err = x.call(ctx, func(ctx context.Context) error {
				resp, err := x.c.op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: int32(n), Manual: a.Manual})
				if err != nil {
					return err
				}
				var es []*pb.OwnedEntity
				for _, m := range resp.Machines {
					es = append(es, &pb.OwnedEntity{Kind: "machine", Id: m.Id, Resource: rp.Name})
				}
				return x.claim(ctx, es...)
			})
		case manifest.ActPlugin:
			if x.plugins == nil {
				return errors.New("no plugins")
			}
			if err = x.plugins.Do(ctx, r, rp.Config, *a.Plugin); err != nil {
				return fmt.Errorf("action %s: %w", a.Plugin.Name, err)
			}
		default:
			err = fmt.Errorf("cannot apply a %s action", a.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", a.Describe(), x.c.check(err))
		}
	}
	if settle {
		return x.settle(ctx, rp)
	}
	return nil
}

// call makes one call with the usual call timeout.
func (x *ctlExecutor) call(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	return f(ctx)
}

// claim records the manifest as the owner of what was just created.
func (x *ctlExecutor) claim(ctx context.Context, es ...*pb.OwnedEntity) error {
	_, err := x.c.op.ClaimOwnership(ctx, &pb.ClaimOwnershipRequest{Manifest: x.manifest, Entities: es})
	if err != nil {
		return fmt.Errorf("record the owner: %w", err)
	}
	return nil
}

// upload packs and uploads a service resource's charm.
func (x *ctlExecutor) upload(ctx context.Context, ch *manifest.Charm) (*pb.Charm, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var buf bytes.Buffer
	info, err := charm.Pack(ch.Path, &buf)
	if err != nil {
		return nil, err
	}
	resp, err := uploadCharmStrict(ctx, x.c, buf.Bytes(), info.SHA256, false)
	if err != nil {
		return nil, err
	}
	return resp.GetCharm(), nil
}

func (x *ctlExecutor) createService(ctx context.Context, ch *manifest.Checked, rp *manifest.ResourcePlan, a manifest.Action) error {
	rec, err := x.upload(ctx, ch.Charms[rp.Name])
	if err != nil {
		return err
	}
	n, _ := a.Count.(int64)
	settings := map[string]string{}
	for k, v := range a.Config {
		settings[k] = valueString(v)
	}
	return x.call(ctx, func(ctx context.Context) error {
		_, err := x.c.op.Deploy(ctx, &pb.DeployRequest{Charm: rec.Name, Revision: rec.Revision, Service: rp.Name,
			NumUnits: int32(n), To: a.To, Config: settings})
		if err != nil {
			return err
		}
		return x.claim(ctx, &pb.OwnedEntity{Kind: "service", Id: rp.Name, Resource: rp.Name})
	})
}

// settle waits for a service's units (or a relation's services') to
// settle, as ctl wait does, quietly.
func (x *ctlExecutor) settle(ctx context.Context, rp *manifest.ResourcePlan) error {
	services := []string{}
	if rp.Type == manifest.TypeService {
		services = append(services, rp.Name)
	} else if eps, ok := rp.Config["endpoints"].([]any); ok {
		for _, ep := range eps {
			s, _ := ep.(string)
			svc, _, _ := strings.Cut(s, ":")
			services = append(services, svc)
		}
	}
	sel, err := newSelection(services)
	if err != nil {
		return err
	}
	quiet := *x.e
	quiet.stdout, quiet.stderr, quiet.stderrTTY = io.Discard, io.Discard, false
	// The wait only reads, so a controller answering Unavailable for a
	// moment (etcd's "request timed out" under load) is waited out, as
	// long as the timeout allows: one such answer halted a whole apply.
	start := time.Now()
	for pauseFor := time.Second; ; pauseFor = min(2*pauseFor, 5*time.Second) {
		left, timeout := x.timeout-time.Since(start), time.Duration(0) // 0: none
		if x.timeout > 0 {
			timeout = max(left, time.Second)
		}
		err := waitSettled(ctx, &quiet, x.c, waitOptions{timeout: timeout, sel: sel, tolerate: true})
		if err == nil {
			return nil
		}
		if status.Code(err) != codes.Unavailable || x.timeout > 0 && left < pauseFor || !pause.For(ctx, pauseFor) {
			return fmt.Errorf("waiting for its units to settle: %w", err)
		}
	}
}

// destroy carries out a prune's action.
func (x *ctlExecutor) destroy(ctx context.Context, a manifest.Action) error {
	return x.call(ctx, func(ctx context.Context) error {
		var err error
		switch a.Kind {
		case manifest.ActDestroyService:
			_, err = x.c.op.DestroyService(ctx, &pb.DestroyServiceRequest{Service: a.Service})
		case manifest.ActDestroyRelation:
			var eps []string
			for _, ep := range a.Endpoints {
				s, _ := ep.(string)
				eps = append(eps, s)
			}
			_, err = x.c.op.DestroyRelation(ctx, &pb.DestroyRelationRequest{Endpoints: eps})
		case manifest.ActDestroyMachine:
			_, err = x.c.op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{Machines: a.Units})
		}
		return err
	})
}

// valueString is a configuration value as KEY=VALUE text, which the
// charm's config.yaml types back.
func valueString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case nil:
		return ""
	}
	if reflect.TypeOf(v).Kind() == reflect.Map || reflect.TypeOf(v).Kind() == reflect.Slice {
		b, _ := json.Marshal(v)
		return string(b)
	}
	return fmt.Sprint(v)
}

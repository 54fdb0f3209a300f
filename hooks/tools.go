package hooks

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/lifelinehq/lifeline/charm"
	"github.com/lifelinehq/lifeline/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A tool is one hook tool: its help and what it does. The server parses
// its arguments; the tool binary only carries them.
type tool struct {
	// usage follows the tool's name in its usage line.
	usage string
	// doc explains the tool, in lines of at most 72 characters.
	doc string
	// flags names the flags it takes, from flagDefs (every tool takes
	// -h/--help).
	flags []string
	run   func(c *call, ctx context.Context) error
}

// MaxSettingsBytes bounds a unit's settings in one relation, encoded as
// the controller stores them (a protobuf map of the keys and values), as
// the controller does: a Context refuses the relation-set calls of a hook
// whose values for one relation would pass it, at once, rather than have
// the controller refuse them after the hook.
const MaxSettingsBytes = 64 << 10

// workloadStatuses returns the workload statuses status-set accepts.
func workloadStatuses() []string { return []string{"maintenance", "blocked", "waiting", "active"} }

// tools returns the hook tools by name, the action tools among them.
func tools() map[string]tool {
	t := hookTools()
	maps.Copy(t, portTools())
	maps.Copy(t, actionTools())
	return t
}

// hookTools returns the tools of hooks (which actions may call too).
func hookTools() map[string]tool {
	return map[string]tool{
		"relation-get": {
			usage: "[-r ID] [--format=text|json] [KEY|-] [UNIT]",
			doc: `Prints the settings of UNIT in the relation: KEY's value, or all of them
when KEY is "-" or absent ("key: value" lines, sorted, in text). A key that
is not set prints nothing (null in json). UNIT defaults to the hook's
remote unit in the hook's own relation; name this unit to read its own
settings.`,
			flags: []string{"relation", "format"},
			run:   (*call).relationGet,
		},
		"relation-set": {
			usage: "[-r ID] KEY=VALUE...",
			doc: `Sets this unit's settings in the relation; an empty VALUE deletes KEY.
The changes take effect only if the hook succeeds, all at once. A unit's
settings in a relation hold at most 64 KiB.`,
			flags: []string{"relation"},
			run:   (*call).relationSet,
		},
		"relation-list": {
			usage: "[-r ID] [--format=text|json]",
			doc:   `Prints the remote units in the relation, one a line.`,
			flags: []string{"relation", "format"},
			run:   (*call).relationList,
		},
		"relation-ids": {
			usage: "[--format=text|json] [ENDPOINT]",
			doc: `Prints the ids of this unit's relations on ENDPOINT, one a line.
ENDPOINT defaults to the hook's relation's endpoint in relation hooks;
elsewhere all the unit's relations are listed.`,
			flags: []string{"format"},
			run:   (*call).relationIDs,
		},
		"config-get": {
			usage: "[--format=text|json] [KEY]",
			doc: `Prints the value of configuration option KEY, or all options that have
a value ("key: value" lines, sorted, in text). An option without a value
prints nothing (null in json).`,
			flags: []string{"format"},
			run:   (*call).configGet,
		},
		"unit-get": {
			usage: "[--format=text|json] private-address|public-address",
			doc:   `Prints this unit's private or public address.`,
			flags: []string{"format"},
			run:   (*call).unitGet,
		},
		"status-set": {
			usage: "maintenance|blocked|waiting|active [MESSAGE...]",
			doc:   `Sets this unit's workload status, at once.`,
			run:   (*call).statusSet,
		},
		"status-get": {
			usage: "[--format=text|json]",
			doc: `Prints this unit's workload status; in json, {"status": ...,
"message": ...}.`,
			flags: []string{"format"},
			run:   (*call).statusGet,
		},
		"log": {
			usage: "[-l LEVEL] MESSAGE...",
			doc:   `Writes MESSAGE into the unit agent's log.`,
			flags: []string{"log-level"},
			run:   (*call).log,
		},
	}
}

// flagDef describes a flag: --name, -short, taking a value.
type flagDef struct{ name, short, arg, help string }

func flagDefs() map[string]flagDef {
	return map[string]flagDef{
		"relation":  {"relation", "r", "ID", `the relation: "db:3" (default $` + EnvRelationID + ")"},
		"format":    {"format", "", "FORMAT", "text (the default) or json"},
		"log-level": {"log-level", "l", "LEVEL", "trace, debug, info (the default), warning or error"},
	}
}

// usageError is a mistake in how the tool was called: exit status 2.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// call is one run of a tool.
type call struct {
	hc    Context
	name  string
	env   map[string]string
	flags map[string]string
	args  []string
	out   *bytes.Buffer
}

// invoke runs the tool for req, printing into stdout and stderr, and
// returns its exit status: 0, 1 when it failed, 2 for a usage error.
func (t tool) invoke(ctx context.Context, hc Context, req request, stdout, stderr *bytes.Buffer) int {
	if wantsHelp(req.Args) {
		t.help(req.Tool, stdout)
		return 0
	}
	c := &call{hc: hc, name: req.Tool, env: req.Env, out: stdout}
	err := c.parse(t.flags, req.Args)
	if err == nil {
		err = t.run(c, ctx)
	}
	if err == nil {
		return 0
	}
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	fmt.Fprintf(stderr, "%s: %v\n", req.Tool, err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "--help" {
			return true
		}
	}
	return false
}

func (t tool) help(name string, w *bytes.Buffer) {
	fmt.Fprintf(w, "Usage: %s %s\n\n%s\n\nOptions:\n", name, t.usage, t.doc)
	defs := flagDefs()
	for _, f := range append(slices.Clone(t.flags), "help") {
		d, ok := defs[f]
		if !ok {
			d = flagDef{"help", "h", "", "show this help"}
		}
		opt := "    --" + d.name
		if d.short != "" {
			opt = "-" + d.short + ", --" + d.name
		}
		if d.arg != "" {
			opt += " " + d.arg
		}
		fmt.Fprintf(w, "  %-24s %s\n", opt, d.help)
	}
}

// parse splits args into flags and positional arguments. Flags may come
// anywhere (before "--"): -r ID, -r=ID, --relation ID, --relation=ID. A
// lone "-" is an argument.
func (c *call) parse(allowed []string, args []string) error {
	defs := flagDefs()
	c.flags = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			c.args = append(c.args, args[i+1:]...)
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			c.args = append(c.args, a)
			continue
		}
		long := strings.HasPrefix(a, "--")
		name, val, hasVal := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		flag, _, _ := strings.Cut(a, "=")
		var def *flagDef
		for _, f := range allowed {
			if d := defs[f]; (long && d.name == name) || (!long && d.short != "" && d.short == name) {
				def = &d
			}
		}
		if def == nil {
			return usagef("unknown flag %s: see %s --help", flag, c.name)
		}
		if !hasVal {
			if i+1 == len(args) {
				return usagef("flag %s needs a value: %s", flag, def.arg)
			}
			i++
			val = args[i]
		}
		c.flags[def.name] = val
	}
	if f, ok := c.flags["format"]; ok && f != "text" && f != "json" {
		return usagef("unknown format %q: use text or json", f)
	}
	return nil
}

// want checks the number of positional arguments.
func (c *call) want(lo, hi int) error {
	switch {
	case len(c.args) < lo:
		return usagef("missing arguments: see %s --help", c.name)
	case hi >= 0 && len(c.args) > hi:
		return usagef("unexpected argument %q: see %s --help", c.args[hi], c.name)
	}
	return nil
}

func (c *call) json() bool { return c.flags["format"] == "json" }

func (c *call) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// printLines prints values one a line, or as a json array.
func (c *call) printLines(values []string) error {
	if c.json() {
		return c.printJSON(append([]string{}, values...))
	}
	for _, v := range values {
		fmt.Fprintln(c.out, v)
	}
	return nil
}

// relationID returns the relation the call is about: -r, in full
// ("db:3") or by number ("3"), or the hook's relation.
func (c *call) relationID(ctx context.Context) (string, error) {
	id, given := c.flags["relation"]
	if !given {
		id = c.env[EnvRelationID]
		if id == "" {
			return "", usagef("no relation id: use -r outside relation hooks")
		}
	}
	if _, _, ok := splitRelationID(id); ok {
		return id, nil
	}
	if given && relationNumber(id) {
		ids, err := c.hc.RelationIDs(ctx, "")
		if err != nil {
			return "", err
		}
		for _, full := range ids {
			if _, n, ok := splitRelationID(full); ok && n == id {
				return full, nil
			}
		}
		return "", fmt.Errorf("unknown relation id %s", id)
	}
	return "", usagef("bad relation id %q: want <endpoint>:<id>, like db:3", id)
}

// splitRelationID splits "db:3" into its endpoint and number.
func splitRelationID(id string) (endpoint, number string, ok bool) {
	endpoint, number, ok = strings.Cut(id, ":")
	return endpoint, number, ok && names.ValidEndpoint(endpoint) && relationNumber(number)
}

// relationNumber reports whether s is a relation's number, "3".
func relationNumber(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= 0 && strconv.FormatInt(n, 10) == s
}

func (c *call) relationGet(ctx context.Context) error {
	if err := c.want(0, 2); err != nil {
		return err
	}
	rid, err := c.relationID(ctx)
	if err != nil {
		return err
	}
	key := ""
	if len(c.args) > 0 && c.args[0] != "-" {
		key = c.args[0]
	}
	var unit string
	switch {
	case len(c.args) > 1:
		unit = c.args[1]
		if !names.ValidUnit(unit) {
			return usagef("bad unit name %q", unit)
		}
	case rid != c.env[EnvRelationID]:
		return usagef("no unit: name UNIT for relation %s, which is not the hook's relation", rid)
	case c.env[EnvRemoteUnit] == "":
		return usagef("no unit: name UNIT, as this hook has no remote unit")
	default:
		unit = c.env[EnvRemoteUnit]
	}
	settings, err := c.hc.RelationGet(ctx, rid, unit)
	if err != nil {
		return err
	}
	return c.printMap(settings, key)
}

// printMap prints key's value in m, or all of m when key is "": in text
// "key: value" lines, sorted, and nothing for a key not there; in json
// the value, null for a key not there, or the object.
func (c *call) printMap(m map[string]string, key string) error {
	if m == nil {
		m = map[string]string{}
	}
	if key != "" {
		v, ok := m[key]
		switch {
		case c.json() && !ok:
			return c.printJSON(nil)
		case c.json():
			return c.printJSON(v)
		case ok:
			fmt.Fprintln(c.out, v)
		}
		return nil
	}
	if c.json() {
		return c.printJSON(m)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(c.out, "%s: %s\n", k, m[k])
	}
	return nil
}

func (c *call) relationSet(ctx context.Context) error {
	if err := c.want(1, -1); err != nil {
		return usagef("no settings: give KEY=VALUE...")
	}
	rid, err := c.relationID(ctx)
	if err != nil {
		return err
	}
	set, unset := map[string]string{}, map[string]bool{}
	for _, a := range c.args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\n") {
			return usagef("bad setting %q: want KEY=VALUE", a)
		}
		if v == "" {
			delete(set, k)
			unset[k] = true
		} else {
			set[k] = v
			delete(unset, k)
		}
	}
	return c.hc.RelationSet(ctx, rid, set, slices.Sorted(maps.Keys(unset)))
}

func (c *call) relationList(ctx context.Context) error {
	if err := c.want(0, 0); err != nil {
		return err
	}
	rid, err := c.relationID(ctx)
	if err != nil {
		return err
	}
	units, err := c.hc.RelationList(ctx, rid)
	if err != nil {
		return err
	}
	slices.SortFunc(units, func(a, b string) int {
		return cmp.Or(strings.Compare(names.UnitService(a), names.UnitService(b)),
			cmp.Compare(names.UnitNumber(a), names.UnitNumber(b)), strings.Compare(a, b))
	})
	return c.printLines(units)
}

func (c *call) relationIDs(ctx context.Context) error {
	if err := c.want(0, 1); err != nil {
		return err
	}
	endpoint := ""
	if len(c.args) == 1 {
		endpoint = c.args[0]
		if !names.ValidEndpoint(endpoint) {
			return usagef("bad endpoint name %q", endpoint)
		}
	} else if ep, _, ok := splitRelationID(c.env[EnvRelationID]); ok {
		endpoint = ep
	}
	ids, err := c.hc.RelationIDs(ctx, endpoint)
	if err != nil {
		return err
	}
	number := func(id string) int64 {
		_, n, _ := strings.Cut(id, ":")
		v, _ := strconv.ParseInt(n, 10, 64)
		return v
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(number(a), number(b)), strings.Compare(a, b)) })
	return c.printLines(ids)
}

func (c *call) configGet(ctx context.Context) error {
	if err := c.want(0, 1); err != nil {
		return err
	}
	config, err := c.hc.Config(ctx)
	if err != nil {
		return err
	}
	if len(c.args) == 1 {
		v := config[c.args[0]]
		switch {
		case c.json():
			return c.printJSON(configJSON(v))
		case v.GetValue() != nil:
			fmt.Fprintln(c.out, charm.FormatValue(v))
		}
		return nil
	}
	set := map[string]any{}
	for k, v := range config {
		if v.GetValue() != nil {
			set[k] = configJSON(v)
		}
	}
	if c.json() {
		return c.printJSON(set)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		fmt.Fprintf(c.out, "%s: %s\n", k, charm.FormatValue(config[k]))
	}
	return nil
}

// configJSON returns a configuration value as the JSON value of its type,
// nil when unset.
func configJSON(v *pb.ConfigValue) any {
	switch x := v.GetValue().(type) {
	case *pb.ConfigValue_StringValue:
		return x.StringValue
	case *pb.ConfigValue_IntValue:
		return x.IntValue
	case *pb.ConfigValue_FloatValue:
		return x.FloatValue
	case *pb.ConfigValue_BoolValue:
		return x.BoolValue
	}
	return nil
}

func (c *call) unitGet(ctx context.Context) error {
	if err := c.want(1, 1); err != nil {
		return usagef("name the setting: private-address or public-address")
	}
	kind := c.args[0]
	if kind != "private-address" && kind != "public-address" {
		return usagef("unknown setting %q: use private-address or public-address", kind)
	}
	addr, err := c.hc.UnitAddress(ctx, kind)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(addr)
	}
	fmt.Fprintln(c.out, addr)
	return nil
}

func (c *call) statusSet(ctx context.Context) error {
	if err := c.want(1, -1); err != nil {
		return usagef("name the status: %s", strings.Join(workloadStatuses(), ", "))
	}
	status := c.args[0]
	if !slices.Contains(workloadStatuses(), status) {
		return usagef("unknown status %q: use %s", status, strings.Join(workloadStatuses(), ", "))
	}
	return c.hc.SetWorkloadStatus(ctx, status, strings.Join(c.args[1:], " "))
}

func (c *call) statusGet(ctx context.Context) error {
	if err := c.want(0, 0); err != nil {
		return err
	}
	status, message, err := c.hc.WorkloadStatus(ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(map[string]string{"status": status, "message": message})
	}
	fmt.Fprintln(c.out, status)
	return nil
}

func (c *call) log(ctx context.Context) error {
	if err := c.want(1, -1); err != nil {
		return usagef("no message")
	}
	level := "info"
	if l, ok := c.flags["log-level"]; ok {
		switch strings.ToLower(l) {
		case "trace", "debug", "info", "error":
			level = strings.ToLower(l)
		case "warning", "warn":
			level = "warn"
		case "critical":
			level = "error"
		default:
			return usagef("unknown log level %q: use trace, debug, info, warning or error", l)
		}
	}
	c.hc.Log(level, strings.Join(c.args, " "))
	return nil
}

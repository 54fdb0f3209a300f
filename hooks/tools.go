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

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/names"
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
	maps.Copy(t, jujuTools())
	maps.Copy(t, leadershipTools())
	return t
}

// hookTools returns the tools of hooks (which actions may call too).
func hookTools() map[string]tool {
	return map[string]tool{
		"relation-get": {
			usage: "[-r ID] [--app] [--format=text|smart|yaml|json] [KEY|-] [UNIT]",
			doc: `Prints the settings of UNIT in the relation: KEY's value, or all of them
when KEY is "-" or absent ("key: value" lines, sorted, in text). A key that
is not set prints nothing (null in json). UNIT defaults to the hook's
remote unit in the hook's own relation; name this unit to read its own
settings. With --app, the settings of UNIT's service.`,
			flags: []string{"relation", "format", "app"},
			run:   (*call).relationGet,
		},
		"relation-set": {
			usage: "[-r ID] [--app] [--file FILE|-] KEY=VALUE...",
			doc: `Sets this unit's settings in the relation; an empty VALUE deletes KEY.
The changes take effect only if the hook succeeds, all at once. A unit's
settings in a relation hold at most 64 KiB. --file reads settings first
from FILE, a YAML map (or KEY=VALUE lines); the arguments override them.
With --app, the service's settings.`,
			flags: []string{"relation", "app", "file", "format"},
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
			usage: "[--format=text|smart|yaml|json] [-a|--all] [KEY]",
			doc: `Prints the value of configuration option KEY, or all options that have
a value ("key: value" lines, sorted, in text); --all prints the options
without a value too. An option without a value prints nothing (null in
json).`,
			flags: []string{"format", "all"},
			run:   (*call).configGet,
		},
		"unit-get": {
			usage: "[--format=text|json] private-address|public-address",
			doc:   `Prints this unit's private or public address.`,
			flags: []string{"format"},
			run:   (*call).unitGet,
		},
		"status-set": {
			usage: "[--application] maintenance|blocked|waiting|active [MESSAGE...]",
			doc:   `Sets this unit's workload status, at once; --application, its service's.`,
			flags: []string{"application"},
			run:   (*call).statusSet,
		},
		"status-get": {
			usage: "[--format=text|smart|yaml|json] [--include-data] [--application]",
			doc: `Prints this unit's workload status; in json, {"status": ...,
"message": ...}. --include-data prints the message in every format;
--application, the service's status.`,
			flags: []string{"format", "include-data", "application"},
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
		"format":    {"format", "", "FORMAT", "text, smart, yaml or json"},
		"log-level": {"log-level", "l", "LEVEL", "trace, debug, info (the default), warning or error"},
	}
}

// allFlagDefs returns flagDefs and jujuFlagDefs together.
func allFlagDefs() map[string]flagDef {
	d := flagDefs()
	maps.Copy(d, jujuFlagDefs())
	return d
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
	// stderr takes warnings of a call that succeeds.
	stderr *bytes.Buffer
	// input is what the tool read for "--file -" or a file it named.
	input string
}

// invoke runs the tool for req, printing into stdout and stderr, and
// returns its exit status: 0, 1 when it failed, 2 for a usage error.
func (t tool) invoke(ctx context.Context, hc Context, req request, stdout, stderr *bytes.Buffer) int {
	if wantsHelp(req.Args) {
		t.help(req.Tool, stdout)
		return 0
	}
	c := &call{hc: hc, name: req.Tool, env: req.Env, out: stdout, stderr: stderr, input: req.Input}
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
	defs := allFlagDefs()
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
// anywhere (before "--"): -r ID, -r=ID, --relation ID, --relation=ID; a
// flag without a value, --all or -a. A lone "-" is an argument.
func (c *call) parse(allowed []string, args []string) error {
	defs := allFlagDefs()
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
		if def.arg == "" {
			if hasVal {
				return usagef("flag %s takes no value", flag)
			}
			c.flags[def.name] = "true"
			continue
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
	if f, ok := c.flags["format"]; ok && !slices.Contains(formats(), f) {
		return usagef("unknown format %q: use %s", f, strings.Join(formats(), ", "))
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
	case len(c.args) > 1 && c.set("app") && names.ValidService(c.args[1]):
		unit = c.args[1] + "/0" // names the service: only its service is read
	case len(c.args) > 1:
		unit = c.args[1]
		if !names.ValidUnit(unit) {
			return usagef("bad unit name %q", unit)
		}
	case rid != c.env[EnvRelationID]:
		return usagef("no unit: name UNIT for relation %s, which is not the hook's relation", rid)
	case c.set("app") && c.env[EnvRemoteService] != "":
		unit = c.env[EnvRemoteService] + "/0" // names the service: only its service is read
	case c.env[EnvRemoteUnit] == "":
		return usagef("no unit: name UNIT, as this hook has no remote unit")
	default:
		unit = c.env[EnvRemoteUnit]
	}
	var settings map[string]string
	if c.set("app") {
		ac, err := c.appSettings()
		if err != nil {
			return err
		}
		settings, err = ac.AppRelationGet(ctx, rid, names.UnitService(unit))
		if err != nil {
			return err
		}
	} else if settings, err = c.hc.RelationGet(ctx, rid, unit); err != nil {
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
	if f := c.format("text"); f == "smart" || f == "yaml" {
		if key == "" {
			return c.printAs(f, stringMap(m), nil)
		}
		if v, ok := m[key]; ok {
			return c.printAs(f, v, nil)
		}
		return nil
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
	_, file := c.flags["file"]
	if file && c.flags["file"] != "-" {
		return usagef("--file: the tool reads the file itself: run it from a hook")
	}
	if err := c.want(1, -1); err != nil && !file {
		return usagef("no settings: give KEY=VALUE...")
	}
	rid, err := c.relationID(ctx)
	if err != nil {
		return err
	}
	var pairs [][2]string
	if file {
		fromFile, err := readSettingsFile(c.input)
		if err != nil {
			return err
		}
		for _, k := range sortedKeys(fromFile) {
			pairs = append(pairs, [2]string{k, fromFile[k]})
		}
	}
	for _, a := range c.args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\n") {
			return usagef("bad setting %q: want KEY=VALUE", a)
		}
		pairs = append(pairs, [2]string{k, v})
	}
	set, unset := map[string]string{}, map[string]bool{}
	for _, p := range pairs {
		k, v := p[0], p[1]
		if k == "" || strings.ContainsAny(k, " \t\n") {
			return usagef("bad setting key %q", k)
		}
		if v == "" {
			delete(set, k)
			unset[k] = true
		} else {
			set[k] = v
			delete(unset, k)
		}
	}
	if c.set("app") {
		if err := c.requireLeader(ctx, "write relation settings"); err != nil {
			return err
		}
		ac, err := c.appSettings()
		if err != nil {
			return err
		}
		return ac.AppRelationSet(ctx, rid, set, slices.Sorted(maps.Keys(unset)))
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
	if len(c.args) == 1 && c.set("all") {
		return usagef("cannot use argument --all together with key %q", c.args[0])
	}
	config, err := c.hc.Config(ctx)
	if err != nil {
		return err
	}
	f := c.format("text")
	if len(c.args) == 1 {
		v := config[c.args[0]]
		switch {
		case f == "smart" || f == "yaml":
			return c.printAs(f, charm.ConfigValueOf(v), nil)
		case c.json():
			return c.printJSON(charm.ConfigValueOf(v))
		case v.GetValue() != nil:
			fmt.Fprintln(c.out, charm.FormatValue(v))
		}
		return nil
	}
	set := map[string]any{}
	for k, v := range config {
		if v.GetValue() != nil || c.set("all") {
			set[k] = charm.ConfigValueOf(v)
		}
	}
	switch f {
	case "json", "yaml", "smart":
		return c.printAs(f, set, nil)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		fmt.Fprintf(c.out, "%s: %s\n", k, charm.FormatValue(config[k]))
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
	if c.set("application") {
		if err := c.requireLeader(ctx, "set the service's status"); err != nil {
			return err
		}
		ac, err := c.appContext()
		if err != nil {
			return err
		}
		return ac.SetApplicationStatus(ctx, status, strings.Join(c.args[1:], " "))
	}
	return c.hc.SetWorkloadStatus(ctx, status, strings.Join(c.args[1:], " "))
}

func (c *call) statusGet(ctx context.Context) error {
	if err := c.want(0, 0); err != nil {
		return err
	}
	var status, message string
	var err error
	if c.set("application") {
		if err := c.requireLeader(ctx, "read the service's status"); err != nil {
			return err
		}
		ac, err := c.appContext()
		if err != nil {
			return err
		}
		status, message, err = ac.ApplicationStatus(ctx)
		if err != nil {
			return err
		}
	} else if status, message, err = c.hc.WorkloadStatus(ctx); err != nil {
		return err
	}
	f := c.format("text")
	switch {
	case f == "json" && !c.set("include-data"):
		// Lifeline's json form, kept: it carries the message too.
		return c.printJSON(map[string]string{"status": status, "message": message})
	case c.set("include-data"):
		m := map[string]any{"status": status, "message": message, "status-data": map[string]any{}}
		if f == "text" {
			f = "smart"
		}
		return c.printAs(f, m, nil)
	case f == "yaml" || f == "smart":
		return c.printAs(f, status, nil)
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
		lv, ok := logLevel(l)
		if !ok {
			return usagef("unknown log level %q: use trace, debug, info, warning or error", l)
		}
		level = lv
	}
	c.hc.Log(level, strings.Join(c.args, " "))
	return nil
}

// logLevel maps a log level as log and juju-log take it (any case;
// Juju's WARNING and CRITICAL too) to the agent's: trace, debug, info,
// warn or error.
func logLevel(l string) (string, bool) {
	switch l = strings.ToLower(l); l {
	case "trace", "debug", "info", "error":
		return l, true
	case "warning", "warn":
		return "warn", true
	case "critical":
		return "error", true
	}
	return "", false
}

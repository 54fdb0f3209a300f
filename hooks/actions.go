package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ActionContext is the Context of a run of one of a charm's actions: the
// hook tools work in it as in a hook, and so do the action tools, which
// fail in a hook.
type ActionContext interface {
	Context
	// ActionParams returns the action's parameters as validated against
	// the charm's actions.yaml, defaults applied: a JSON object, decoded.
	ActionParams(ctx context.Context) (map[string]any, error)
	// SetActionResults merges results into the action's: keys are dotted
	// paths ("backup.path"), each segment as ValidActionKey says, and a
	// later value of a key replaces an earlier one.
	SetActionResults(ctx context.Context, results map[string]string) error
	// FailAction marks the action failed, with message; it goes on
	// running until it exits.
	FailAction(ctx context.Context, message string) error
	// ActionLog adds message to the action's log.
	ActionLog(ctx context.Context, message string) error
	// Checkpoint returns the action's checkpoint: the values its runs
	// stored with SetCheckpoint, kept across a pause and a resume.
	Checkpoint(ctx context.Context) (map[string]string, error)
	// SetCheckpoint merges values into the checkpoint, stored durably
	// (in the controller) before it returns.
	SetCheckpoint(ctx context.Context, values map[string]string) error
}

// Action tools' defaults and bounds.
const (
	// defaultFailMessage is action-fail's message when it is given none.
	defaultFailMessage = "action failed without reason given"
	// maxActionKeyLen bounds a key of action-set and checkpoint-set.
	maxActionKeyLen = 256
)

// reservedResultKeys are keys of an action's results that Juju keeps for
// the action's output, which action-set refuses as Juju does.
var reservedResultKeys = []string{"stdout", "stdout-encoding", "stderr", "stderr-encoding"}

// actionTools returns the tools that only an action may call.
func actionTools() map[string]tool {
	return map[string]tool{
		"action-get": {
			usage: "[--format=text|json] [KEY]",
			doc: `Prints the action's parameter KEY (a dotted path into nested ones:
"target.host"), or all of them. In text a string prints as it is and
anything else as YAML; a parameter not given prints nothing (null in
json).`,
			flags: []string{"format"},
			run:   (*call).actionGet,
		},
		"action-set": {
			usage: "KEY=VALUE...",
			doc: `Sets results of the action. Dotted keys nest ("backup.path=/b" is
{"backup": {"path": "/b"}}); values are strings. A key is lowercase
letters, digits and "-", starting and ending with a letter or digit;
stdout, stderr, stdout-encoding and stderr-encoding are reserved.`,
			run: (*call).actionSet,
		},
		"action-fail": {
			usage: "[MESSAGE...]",
			doc: `Marks the action failed, with MESSAGE. The action goes on until it
exits; its results stay.`,
			run: (*call).actionFail,
		},
		"action-log": {
			usage: "MESSAGE...",
			doc:   `Adds MESSAGE to the action's log, which ctl logs shows.`,
			run:   (*call).actionLog,
		},
		"checkpoint-get": {
			usage: "[--format=text|json] [KEY]",
			doc: `Prints KEY's value in the action's checkpoint, or all of it ("key:
value" lines, sorted, in text). A run resumed after a pause (or after
its machine was lost) finds what the runs before it stored; a key not
set prints nothing (null in json).`,
			flags: []string{"format"},
			run:   (*call).checkpointGet,
		},
		"checkpoint-set": {
			usage: "KEY=VALUE...",
			doc: `Stores KEY=VALUE in the action's checkpoint, durably, before it
returns: a resumed run reads it with checkpoint-get. Keys are as
action-set's.`,
			run: (*call).checkpointSet,
		},
	}
}

// errNotAction is what an action tool says in a hook.
var errNotAction = errors.New("not running an action: only a charm's actions may call it")

// action returns the call's ActionContext, or errNotAction.
func (c *call) action() (ActionContext, error) {
	ac, ok := c.hc.(ActionContext)
	if !ok {
		return nil, errNotAction
	}
	return ac, nil
}

// ValidActionKey reports whether key is a key of action-set and
// checkpoint-set: dot-separated segments of lowercase letters, digits and
// "-", each starting and ending with a letter or digit, at most 256
// characters in all.
func ValidActionKey(key string) bool {
	if key == "" || len(key) > maxActionKeyLen {
		return false
	}
	for _, seg := range strings.Split(key, ".") {
		if seg == "" || seg[0] == '-' || seg[len(seg)-1] == '-' {
			return false
		}
		for _, r := range seg {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}

// keyValues parses KEY=VALUE arguments, each key as ValidActionKey says;
// a later value of a key replaces an earlier one.
func (c *call) keyValues() (map[string]string, error) {
	if len(c.args) == 0 {
		return nil, usagef("nothing to set: give KEY=VALUE...")
	}
	out := map[string]string{}
	for _, a := range c.args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, usagef("bad argument %q: want KEY=VALUE", a)
		}
		if !ValidActionKey(k) {
			return nil, usagef("bad key %q: lowercase letters, digits and \"-\", dots between parts", k)
		}
		out[k] = v
	}
	return out, nil
}

func (c *call) actionGet(ctx context.Context) error {
	if err := c.want(0, 1); err != nil {
		return err
	}
	ac, err := c.action()
	if err != nil {
		return err
	}
	params, err := ac.ActionParams(ctx)
	if err != nil {
		return err
	}
	var v any = params
	if len(c.args) == 1 {
		v = lookupPath(params, c.args[0])
	}
	if c.json() {
		return c.printJSON(v)
	}
	return c.printValue(v)
}

// lookupPath follows a dotted path into nested maps: nil when a part of
// it is not there.
func lookupPath(m map[string]any, path string) any {
	var v any = m
	for _, part := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = mm[part]; !ok {
			return nil
		}
	}
	return v
}

// printValue prints v as text: nothing for nil, a string as it is, a
// number or boolean as JSON writes it, anything else as YAML.
func (c *call) printValue(v any) error {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		fmt.Fprintln(c.out, x)
		return nil
	case bool:
		fmt.Fprintln(c.out, strconv.FormatBool(x))
		return nil
	case float64, json.Number, int, int64:
		b, err := json.Marshal(x)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.out, string(b))
		return nil
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	c.out.Write(b)
	return nil
}

func (c *call) actionSet(ctx context.Context) error {
	results, err := c.keyValues()
	if err != nil {
		return err
	}
	for k := range results {
		top, _, _ := strings.Cut(k, ".")
		if slices.Contains(reservedResultKeys, top) {
			return usagef("key %q is reserved for the action's output: use another", k)
		}
		// "a" and "a.b" at once would make a both a value and a map.
		for other := range results {
			if strings.HasPrefix(other, k+".") {
				return usagef("keys %q and %q clash: %s cannot hold both a value and keys", k, other, k)
			}
		}
	}
	ac, err := c.action()
	if err != nil {
		return err
	}
	return ac.SetActionResults(ctx, results)
}

func (c *call) actionFail(ctx context.Context) error {
	ac, err := c.action()
	if err != nil {
		return err
	}
	msg := strings.Join(c.args, " ")
	if msg == "" {
		msg = defaultFailMessage
	}
	return ac.FailAction(ctx, msg)
}

func (c *call) actionLog(ctx context.Context) error {
	if err := c.want(1, -1); err != nil {
		return usagef("no message")
	}
	ac, err := c.action()
	if err != nil {
		return err
	}
	return ac.ActionLog(ctx, strings.Join(c.args, " "))
}

func (c *call) checkpointGet(ctx context.Context) error {
	if err := c.want(0, 1); err != nil {
		return err
	}
	ac, err := c.action()
	if err != nil {
		return err
	}
	cp, err := ac.Checkpoint(ctx)
	if err != nil {
		return err
	}
	key := ""
	if len(c.args) == 1 {
		key = c.args[0]
	}
	return c.printMap(cp, key)
}

func (c *call) checkpointSet(ctx context.Context) error {
	values, err := c.keyValues()
	if err != nil {
		return err
	}
	ac, err := c.action()
	if err != nil {
		return err
	}
	return ac.SetCheckpoint(ctx, values)
}

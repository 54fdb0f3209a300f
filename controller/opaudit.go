package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lifelinehq/lifeline/internal/names"
)

// What an operation's calls show in the audit log (describe): the entry
// holds at most state.MaxAuditTargets targets, so that a few units are
// named and the operation's id, known once made, still fits.

// auditUnits bounds the units an operation's entry names.
const auditUnits = 8

// operationTargets names a RunAction's service and its first units.
func operationTargets(targets []string) []string {
	var out []string
	units := 0
	for _, t := range targets {
		svc := t
		if strings.Contains(t, "/") {
			svc = names.UnitService(t)
			if units < auditUnits {
				out = append(out, "unit:"+t)
			}
			units++
		}
		if s := "service:" + svc; !slices.Contains(out, s) && len(out) < 2*auditUnits {
			out = append(out, s)
		}
	}
	if units > auditUnits {
		out = append(out, fmt.Sprintf("(%d more units)", units-auditUnits))
	}
	return out
}

// taskVerbTargets names the operation and the first units a verb names.
func taskVerbTargets(id int64, units []string) []string {
	out := []string{opTarget(id)}
	for _, u := range units[:min(len(units), auditUnits)] {
		out = append(out, "unit:"+u)
	}
	if len(units) > auditUnits {
		out = append(out, fmt.Sprintf("(%d more units)", len(units)-auditUnits))
	}
	return out
}

func taskVerbSummary(verb string, id int64, units []string) string {
	if len(units) == 0 {
		return fmt.Sprintf("%s operation %d's tasks", verb, id)
	}
	return fmt.Sprintf("%s operation %d's tasks on %s", verb, id, listSome(units, auditUnits))
}

// paramKeys names the parameters' top-level keys, never their values
// (which may be secrets).
func paramKeys(params []byte) string {
	if len(bytes.TrimSpace(params)) == 0 {
		return ""
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return ", parameters not a JSON object"
	}
	if len(m) == 0 {
		return ""
	}
	return ", parameter keys " + listSome(slices.Sorted(maps.Keys(m)), 16)
}

func maxParallel(n int32) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", max-parallel %d", n)
}

// listSome joins at most n items, saying how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, " ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], " "), len(items)-n)
}

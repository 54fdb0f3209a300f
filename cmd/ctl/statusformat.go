package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ohler55/ojg/jp"
	"github.com/ohler55/ojg/oj"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// renderLines writes the status as one line a unit, principals each
// followed by their subordinates, with every field always there (- when
// empty) in a fixed order and the message last, quoted:
//
//	kv/0 service=kv machine=0 principal=- life=alive agent=idle state=running workload=active rev=4 target=4 message="serving"
//
// target is the revision the unit moves to (rev while it moves to none).
func renderLines(w io.Writer, st *pb.ModelStatus) error {
	var b strings.Builder
	for _, r := range unitRows(st.GetServices()) {
		u := r.unit
		target := u.TargetRevision
		if target == 0 {
			target = u.Revision
		}
		fmt.Fprintf(&b, "%s service=%s machine=%s principal=%s life=%s agent=%s state=%s workload=%s rev=%d target=%d message=%s\n",
			u.Name, names.UnitService(u.Name), dash(u.Machine), dash(u.Principal), dash(u.Life), dash(u.Agent), dash(u.State),
			dash(u.Workload), u.Revision, target, strconv.Quote(note(u.Message, u.WaitingFor)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonPathPrefix starts -o's jsonpath format.
const jsonPathPrefix = "jsonpath="

// parseJSONPath parses a -o jsonpath=EXPR expression: JSONPath as
// github.com/ohler55/ojg/jp reads it ($.services.kv.units), also
// written as kubectl writes it, in braces and without the $
// ({.services.kv.units}).
func parseJSONPath(expr string) (jp.Expr, error) {
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "{") && strings.HasSuffix(e, "}") {
		e = strings.TrimSpace(e[1 : len(e)-1])
	}
	switch {
	case e == "":
		return nil, fmt.Errorf("jsonpath: empty expression")
	case strings.HasPrefix(e, "."), strings.HasPrefix(e, "["):
		e = "$" + e
	}
	x, err := jp.ParseString(e)
	if err != nil {
		return nil, fmt.Errorf("jsonpath %q: %v", expr, err)
	}
	return x, nil
}

// renderJSONPath writes what x selects of the status document, one
// result a line: a string as it is, anything else as compact JSON. It
// fails when x selects nothing, so that scripts notice a wrong path.
func renderJSONPath(w io.Writer, st *pb.ModelStatus, x jp.Expr) error {
	// The document as JSON decodes it: what the json format shows.
	data, err := json.Marshal(statusDocument(st))
	if err != nil {
		return err
	}
	doc, err := oj.Parse(data)
	if err != nil {
		return err
	}
	found := x.Get(keyedDocument(doc))
	if len(found) == 0 {
		return fmt.Errorf("jsonpath %s selects nothing", x)
	}
	var b strings.Builder
	for _, v := range found {
		if s, ok := v.(string); ok {
			b.WriteString(s)
		} else {
			b.WriteString(oj.JSON(unsorted(v), &oj.Options{Sort: true}))
		}
		b.WriteByte('\n')
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// statusHeader is the line above the tabular status: the controller that
// answered (its id, its first address and its version), the time it read
// the model at, and the user asking.
func statusHeader(controller, version string, at int64, st *pb.ModelStatus, user string) string {
	if controller == "" && user == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Controller %s", dash(controller))
	for _, c := range st.GetControllers() {
		if c.Id == controller && len(c.Addresses) > 0 {
			fmt.Fprintf(&b, " at %s", c.Addresses[0])
		}
	}
	if version != "" {
		fmt.Fprintf(&b, ", version %s", version)
	}
	if at != 0 {
		fmt.Fprintf(&b, ", model time %s", time.Unix(0, at).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, ", user %s\n\n", dash(user))
	return b.String()
}

// keyedObject is a JSON object whose keys jp visits in order (a
// wildcard over a Go map would visit them in a random one, and a
// script's output would change from run to run).
type keyedObject struct {
	m    map[string]any
	keys []string
}

func (o *keyedObject) ValueForKey(k string) (any, bool) { v, ok := o.m[k]; return v, ok }
func (o *keyedObject) SetValueForKey(k string, v any)   { o.m[k] = v }
func (o *keyedObject) RemoveValueForKey(k string)       { delete(o.m, k) }
func (o *keyedObject) Keys() []string                   { return o.keys }

// keyedDocument makes every object of a decoded JSON document a
// keyedObject, its keys sorted (machines by number, as status shows
// them).
func keyedDocument(v any) any {
	switch x := v.(type) {
	case map[string]any:
		o := &keyedObject{m: make(map[string]any, len(x))}
		for k, e := range x {
			o.m[k] = keyedDocument(e)
			o.keys = append(o.keys, k)
		}
		sort.Slice(o.keys, func(i, j int) bool { return lessNumeric(o.keys[i], o.keys[j]) })
		return o
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = keyedDocument(e)
		}
		return out
	}
	return v
}

// unsorted undoes keyedDocument, for writing a result as JSON.
func unsorted(v any) any {
	switch x := v.(type) {
	case *keyedObject:
		out := make(map[string]any, len(x.m))
		for k, e := range x.m {
			out[k] = unsorted(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = unsorted(e)
		}
		return out
	}
	return v
}

package main

import (
	"io"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// writeStatusJSON writes the status document as
// json.MarshalIndent(doc, "", "  ") does, byte for byte, and a new line,
// without reflection, without a second pass to indent and in pieces of
// 64 KiB: at 100,000 units encoding/json spent half of ctl status's CPU
// on the document. Each
// type's fields go in their struct's order with their tags' names and
// omitempty rules; TestStatusJSONMatchesEncodingJSON fills every field
// of every type by reflection and compares, so a field added to a type
// and not here fails it.
func writeStatusJSON(out io.Writer, d statusDoc) error {
	w := jsonWriter{out: out, b: make([]byte, 0, jsonChunk+4096)}
	w.open('{')
	w.key("schema_version")
	w.int(int64(d.SchemaVersion))
	if d.Revision != 0 {
		w.key("revision")
		w.int(d.Revision)
	}
	w.key("machines")
	w.mapOf(d.Machines == nil, slices.Sorted(maps.Keys(d.Machines)), func(k string) { w.machine(d.Machines[k]) })
	w.key("services")
	w.mapOf(d.Services == nil, slices.Sorted(maps.Keys(d.Services)), func(k string) { w.service(d.Services[k]) })
	w.key("relations")
	if d.Relations == nil {
		w.null()
	} else {
		w.open('[')
		for _, r := range d.Relations {
			w.elem()
			w.relation(r)
		}
		w.close(']')
	}
	if len(d.Controllers) > 0 {
		w.key("controllers")
		w.mapOf(false, slices.Sorted(maps.Keys(d.Controllers)), func(k string) {
			c := d.Controllers[k]
			w.open('{')
			w.key("addresses")
			w.strings(c.Addresses)
			if c.Leader {
				w.key("leader")
				w.bool(true)
			}
			w.close('}')
		})
	}
	if len(d.Alarms) > 0 {
		w.key("alarms")
		w.strings(d.Alarms)
	}
	w.key("operations")
	w.open('{')
	w.key("running")
	w.int(int64(d.Operations.Running))
	w.key("awaiting_approval")
	w.int(int64(d.Operations.AwaitingApproval))
	w.key("approved")
	w.int(int64(d.Operations.Approved))
	w.key("lost_tasks")
	w.int(d.Operations.LostTasks)
	w.close('}')
	w.close('}')
	w.b = append(w.b, '\n')
	w.flush()
	return w.err
}

func (w *jsonWriter) machine(m machineDoc) {
	w.open('{')
	w.field("life", m.Life)
	w.field("instance", m.Instance)
	w.field("address", m.Address)
	w.field("agent", m.Agent)
	w.key("units")
	w.strings(m.Units)
	w.fieldOmit("message", m.Message)
	if m.Forced {
		w.key("forced")
		w.bool(true)
	}
	w.stringsOmit("waiting_for", m.WaitingFor)
	w.fieldOmit("since", m.Since)
	w.close('}')
}

func (w *jsonWriter) service(s serviceDoc) {
	w.open('{')
	w.field("charm", s.Charm)
	w.key("revision")
	w.int(s.Revision)
	w.field("life", s.Life)
	w.field("status", s.Status)
	w.key("units")
	w.mapOf(s.Units == nil, slices.Sorted(maps.Keys(s.Units)), func(k string) { w.unit(s.Units[k]) })
	w.fieldOmit("message", s.Message)
	if s.Subordinate {
		w.key("subordinate")
		w.bool(true)
	}
	w.stringsOmit("waiting_for", s.WaitingFor)
	if s.SpecRevision != 0 {
		w.key("spec_revision")
		w.int(s.SpecRevision)
	}
	if r := s.Rollout; r != nil {
		w.key("rollout")
		w.open('{')
		w.field("state", r.State)
		w.key("target")
		w.int(r.Target)
		w.key("previous")
		w.int(r.Previous)
		w.key("updated")
		w.int(int64(r.Updated))
		w.key("units")
		w.int(int64(r.Units))
		w.fieldOmit("reason", r.Reason)
		w.close('}')
	}
	w.fieldOmit("version", s.Version)
	w.close('}')
}

func (w *jsonWriter) unit(u unitDoc) {
	w.open('{')
	w.field("life", u.Life)
	w.field("machine", u.Machine)
	w.field("principal", u.Principal)
	w.field("agent", u.Agent)
	w.field("state", u.State)
	w.field("workload", u.Workload)
	w.field("message", u.Message)
	w.fieldOmit("address", u.Address)
	w.stringsOmit("subordinates", u.Subordinates)
	w.stringsOmit("waiting_for", u.WaitingFor)
	if u.Revision != 0 {
		w.key("revision")
		w.int(u.Revision)
	}
	if u.TargetRevision != 0 {
		w.key("target_revision")
		w.int(u.TargetRevision)
	}
	w.fieldOmit("agent_since", u.AgentSince)
	w.fieldOmit("workload_since", u.WorkloadSince)
	w.stringsOmit("ports", u.Ports)
	if u.Leader {
		w.key("leader")
		w.bool(true)
	}
	w.close('}')
}

func (w *jsonWriter) relation(r relationDoc) {
	w.open('{')
	w.key("id")
	w.int(r.ID)
	w.field("key", r.Key)
	w.field("life", r.Life)
	w.field("scope", r.Scope)
	w.stringsOmit("units", r.Units)
	w.stringsOmit("waiting_for", r.WaitingFor)
	w.key("endpoints")
	if r.Endpoints == nil {
		w.null()
	} else {
		w.open('[')
		for _, ep := range r.Endpoints {
			w.elem()
			w.open('{')
			w.field("service", ep.Service)
			w.field("endpoint", ep.Endpoint)
			w.fieldOmit("role", ep.Role)
			w.fieldOmit("interface", ep.Interface)
			w.close('}')
		}
		w.close(']')
	}
	w.close('}')
}

// jsonWriter appends indented JSON as json.MarshalIndent with an indent
// of two spaces does: each member or element on a line of its own, "key":
// value, and an empty object or array as {} or [].
type jsonWriter struct {
	out io.Writer
	// err is the first error writing to out; writing stops after it.
	err   error
	b     []byte
	depth int
	// first says that the innermost open object or array has no member
	// or element yet.
	first bool
}

// open starts an object or an array.
func (w *jsonWriter) open(c byte) {
	w.b = append(w.b, c)
	w.depth++
	w.first = true
}

// close ends the object or array opened last: an empty one on the line
// it opened on.
func (w *jsonWriter) close(c byte) {
	w.depth--
	if !w.first {
		w.newline()
	}
	w.b = append(w.b, c)
	w.first = false
}

// jsonChunk is how much a jsonWriter holds before it writes.
const jsonChunk = 64 << 10

// flush writes what the writer holds.
func (w *jsonWriter) flush() {
	if w.err == nil {
		_, w.err = w.out.Write(w.b)
	}
	w.b = w.b[:0]
}

// elem starts an element of an array.
func (w *jsonWriter) elem() {
	if len(w.b) >= jsonChunk {
		w.flush()
	}
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.newline()
}

// key starts a member of an object.
func (w *jsonWriter) key(k string) {
	w.elem()
	w.b = appendJSONString(w.b, k)
	w.b = append(w.b, ':', ' ')
}

func (w *jsonWriter) newline() {
	w.b = append(w.b, '\n')
	for range w.depth {
		w.b = append(w.b, ' ', ' ')
	}
}

func (w *jsonWriter) field(k, v string) {
	w.key(k)
	w.b = appendJSONString(w.b, v)
}

func (w *jsonWriter) fieldOmit(k, v string) {
	if v != "" {
		w.field(k, v)
	}
}

func (w *jsonWriter) int(n int64) { w.b = strconv.AppendInt(w.b, n, 10) }

func (w *jsonWriter) bool(v bool) { w.b = strconv.AppendBool(w.b, v) }

func (w *jsonWriter) null() { w.b = append(w.b, "null"...) }

// strings writes a list of strings: null when nil, as encoding/json.
func (w *jsonWriter) strings(l []string) {
	if l == nil {
		w.null()
		return
	}
	w.open('[')
	for _, s := range l {
		w.elem()
		w.b = appendJSONString(w.b, s)
	}
	w.close(']')
}

func (w *jsonWriter) stringsOmit(k string, l []string) {
	if len(l) > 0 {
		w.key(k)
		w.strings(l)
	}
}

// mapOf writes an object whose keys are given sorted, each member's value
// by value: null when the map is nil.
func (w *jsonWriter) mapOf(isNil bool, keys []string, value func(k string)) {
	if isNil {
		w.null()
		return
	}
	w.open('{')
	for _, k := range keys {
		w.key(k)
		value(k)
	}
	w.close('}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes a string:
// HTML's <, > and & escaped, as are U+2028 and U+2029, and each byte of
// invalid UTF-8 written as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

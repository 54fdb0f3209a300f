package dashboard

import (
	"bytes"
	"html/template"
	"strconv"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The model page's rows are rendered one by one, each named by its
// data-key, so that an open page's stream can send only the rows that
// changed (a "rows" event) rather than the whole page: at 10,000 units
// the page is megabytes, a unit's change one row.

// row is one rendered row of the model page and the key naming it.
type row struct {
	Key  string
	HTML template.HTML
}

// modelRows are the model page's summary and rows, in the order the page
// lists them.
type modelRows struct {
	Summary                              template.HTML
	Units, Services, Machines, Relations []row
}

// rowTables are the ids of the page's table bodies, in the order of
// modelRows.tables.
var rowTables = [...]string{"unit-rows", "service-rows", "machine-rows", "relation-rows"}

func (m *modelRows) tables() [4][]row {
	return [4][]row{m.Units, m.Services, m.Machines, m.Relations}
}

// rowRenderer renders the model page's rows. It keeps each unit's last
// row, so that a unit whose row did not change is not rendered again,
// and each machine's and relation's by the status it was rendered from:
// a stream's held model (modelStream) replaces units and services, never
// its machines or relations, and a read of the whole model brings new
// ones. One renderer a stream, for its pushes.
type rowRenderer struct {
	pages     *template.Template
	units     map[string]renderedUnit
	machines  map[*pb.MachineStatus]template.HTML
	relations map[*pb.RelationStatus]template.HTML
	buf       bytes.Buffer
}

type renderedUnit struct {
	row  unitRow
	html template.HTML
}

// render renders v's rows.
func (r *rowRenderer) render(v *modelView) (*modelRows, error) {
	out := &modelRows{}
	html, err := r.one("model-summary", v)
	if err != nil {
		return nil, err
	}
	out.Summary = html
	units := make(map[string]renderedUnit, len(v.Units))
	out.Units = make([]row, 0, len(v.Units))
	for _, u := range v.Units {
		ru, ok := r.units[u.Name]
		if !ok || ru.row != u {
			html, err := r.one("unit-row", u)
			if err != nil {
				return nil, err
			}
			ru = renderedUnit{row: u, html: html}
		}
		units[u.Name] = ru
		out.Units = append(out.Units, row{Key: "unit:" + u.Name, HTML: ru.html})
	}
	r.units = units
	for _, s := range v.Services {
		html, err := r.one("service-row", s)
		if err != nil {
			return nil, err
		}
		out.Services = append(out.Services, row{Key: "service:" + s.Name, HTML: html})
	}
	machines := make(map[*pb.MachineStatus]template.HTML, len(v.Machines))
	for _, m := range v.Machines {
		html, ok := r.machines[m]
		if !ok {
			if html, err = r.one("machine-row", m); err != nil {
				return nil, err
			}
		}
		machines[m] = html
		out.Machines = append(out.Machines, row{Key: "machine:" + m.Id, HTML: html})
	}
	r.machines = machines
	relations := make(map[*pb.RelationStatus]template.HTML, len(v.Rels))
	for _, rel := range v.Rels {
		html, ok := r.relations[rel]
		if !ok {
			if html, err = r.one("relation-row", rel); err != nil {
				return nil, err
			}
		}
		relations[rel] = html
		out.Relations = append(out.Relations, row{Key: "relation:" + strconv.FormatInt(rel.Id, 10), HTML: html})
	}
	r.relations = relations
	return out, nil
}

func (r *rowRenderer) one(name string, data any) (template.HTML, error) {
	r.buf.Reset()
	if err := r.pages.ExecuteTemplate(&r.buf, name, data); err != nil {
		return "", err
	}
	return template.HTML(r.buf.String()), nil // the template's output, escaped by it
}

// maxPatchRows is the most rows a "rows" event carries: past it the
// whole page is sent, as one replacement is cheaper for the browser
// than thousands of patches.
const maxPatchRows = 2000

// writePatch writes to b what turns the page showing prev into one
// showing next, and reports whether it did: false when the whole page
// should be sent instead (a table emptied or filled, whose placeholder
// row has no key, or more than maxPatchRows rows changed).
//
// The patch is a sequence of <template> elements, which the page's
// script applies in order: the summary (data-summary); each row gone
// (data-gone); then each row new or changed, with the key of the row it
// goes before (data-before, none for the last), from the last row up,
// so that the row it goes before is already in place. A row that did
// not change keeps its place relative to the others that did not, as
// the page's order is by what a row shows.
func writePatch(b *bytes.Buffer, prev, next *modelRows) bool {
	b.Reset()
	if next.Summary != prev.Summary {
		b.WriteString("<template data-summary>")
		b.WriteString(string(next.Summary))
		b.WriteString("</template>\n")
	}
	changed := 0
	pt, nt := prev.tables(), next.tables()
	for i := range pt {
		if (len(pt[i]) == 0) != (len(nt[i]) == 0) {
			return false
		}
		old := make(map[string]template.HTML, len(pt[i]))
		for _, r := range pt[i] {
			old[r.Key] = r.HTML
		}
		now := make(map[string]bool, len(nt[i]))
		for _, r := range nt[i] {
			now[r.Key] = true
		}
		for _, r := range pt[i] {
			if !now[r.Key] {
				if changed++; changed > maxPatchRows {
					return false
				}
				b.WriteString(`<template data-table="` + rowTables[i] + `" data-key="` + template.HTMLEscapeString(r.Key) + `" data-gone></template>` + "\n")
			}
		}
		for j := len(nt[i]) - 1; j >= 0; j-- {
			r := nt[i][j]
			if h, ok := old[r.Key]; ok && h == r.HTML {
				continue
			}
			if changed++; changed > maxPatchRows {
				return false
			}
			b.WriteString(`<template data-table="` + rowTables[i] + `" data-key="` + template.HTMLEscapeString(r.Key) + `"`)
			if j+1 < len(nt[i]) {
				b.WriteString(` data-before="` + template.HTMLEscapeString(nt[i][j+1].Key) + `"`)
			}
			b.WriteString(">")
			b.WriteString(string(r.HTML))
			b.WriteString("</template>\n")
		}
	}
	return true
}

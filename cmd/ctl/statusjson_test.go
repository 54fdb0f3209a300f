package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// fill sets every field of v, recursively, to a value of its own drawn
// from r: strings with characters JSON escapes among them, lists and
// maps of zero to three entries (nil when empty, sometimes), numbers and
// booleans either way. With zero set, every field is its zero value
// instead of empty.
func fill(v reflect.Value, r *rand.Rand) {
	switch v.Kind() {
	case reflect.String:
		alphabet := []string{"a", "kv/1", "<", ">", "&", "\"", "\\", "\n", "\t", "\x01", "\u2028", "\u2029", "é", "\xff", "😀", " "}
		var s string
		for range r.IntN(4) {
			s += alphabet[r.IntN(len(alphabet))]
		}
		v.SetString(s)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(r.IntN(3)) - 1)
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Pointer:
		if r.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), r)
		v.Set(p)
	case reflect.Slice:
		n := r.IntN(4)
		if n == 0 && r.IntN(2) == 0 {
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(s.Index(i), r)
		}
		v.Set(s)
	case reflect.Map:
		n := r.IntN(4)
		if n == 0 && r.IntN(2) == 0 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			fill(k, r)
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e, r)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), r)
		}
	default:
		panic("fill: no case for " + v.Kind().String())
	}
}

// TestStatusJSONMatchesEncodingJSON shows that ctl status --format json
// writes what json.MarshalIndent would: for documents with every field of
// every type filled at random (so a field the writer misses fails it), for
// the empty document, and for a large model's.
func TestStatusJSONMatchesEncodingJSON(t *testing.T) {
	check := func(name string, d statusDoc) {
		t.Helper()
		want, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := writeStatusJSON(&buf, d); err != nil {
			t.Fatal(err)
		}
		got := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: differs at byte %d:\n got …%q…\nwant …%q…", name, i, got[max(0, i-60):min(len(got), i+60)], want[max(0, i-60):min(len(want), i+60)])
		}
	}
	check("empty", statusDoc{})
	check("no model", statusDocument(nil))
	check("bench model", statusDocument(benchStatus(2000)))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var d statusDoc
		fill(reflect.ValueOf(&d).Elem(), r)
		check("random document "+string(rune('0'+i%10)), d)
	}
}

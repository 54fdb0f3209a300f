package charm

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestParseActionParams(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	tests := []struct {
		args []string
		want map[string]any
	}{
		{nil, map[string]any{}},
		{[]string{"n=3", "x=true", `s="3"`, "t=text", "f=1.50", "e=", "z=null"}, map[string]any{
			"n": n("3"), "x": true, "s": "3", "t": "text", "f": n("1.5"), "e": "", "z": nil,
		}},
		// YAML 1.2: yes, y and on are text (Juju's YAML 1.1 reads booleans).
		{[]string{"a=yes", "b=y", "c=on", "d=False"}, map[string]any{"a": "yes", "b": "y", "c": "on", "d": false}},
		// What is not one scalar is text as written.
		{[]string{"l=[1,2]", "m=a: b", "c=a #b", "q=it's", "u=*x", "v=.inf", "w=a\nb"}, map[string]any{
			"l": "[1,2]", "m": "a: b", "c": "a #b", "q": "it's", "u": "*x", "v": ".inf", "w": "a\nb",
		}},
		{[]string{"k='a b'", "eq=a=b", "big=99999999999999999999", "neg=-0", "exp=1e3"}, map[string]any{
			"k": "a b", "eq": "a=b", "big": n("99999999999999999999"), "neg": n("0"), "exp": n("1000"),
		}},
		{[]string{"a.b=1", "a.c.d=x", "Out_file=o", "a-b=2"}, map[string]any{
			"a": map[string]any{"b": n("1"), "c": map[string]any{"d": "x"}}, "Out_file": "o", "a-b": n("2"),
		}},
	}
	for _, tt := range tests {
		got, err := ParseActionParams(tt.args)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseActionParams(%q) = %#v, %v, want %#v", tt.args, got, err, tt.want)
		}
	}
	bad := []struct {
		args []string
		err  string
	}{
		{[]string{"n"}, `argument "n": want KEY=VALUE`},
		{[]string{"=1"}, `argument "=1": key "" is invalid: use letters, digits, - and _, with . between nested keys`},
		{[]string{"a..b=1"}, `argument "a..b=1": key "a..b" is invalid`},
		{[]string{"a b=1"}, `argument "a b=1": key "a b" is invalid`},
		{[]string{"é=1"}, `key "é" is invalid`},
		{[]string{"n=1", "n=2"}, `argument "n=2": key "n" is given twice`},
		{[]string{"a=1", "a.b=2"}, `argument "a.b=2": key "a" is given a value of its own`},
		{[]string{"a.b=2", "a=1"}, `argument "a=1": key "a" is given as an object too`},
		{[]string{"a.b.c=2", "a.b=1"}, `argument "a.b=1": key "a.b" is given as an object too`},
		{[]string{"s=" + strings.Repeat("x", MaxParamsSize)}, "params: the parameters are 65544 bytes as JSON, over the 64 KiB limit"},
	}
	for _, tt := range bad {
		_, err := ParseActionParams(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseActionParams(%.40q) = %v, want an invalid error %q", tt.args, err, tt.err)
		}
	}
}

func TestReadActionParams(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	tests := []struct {
		name string
		file string
		args []string
		want map[string]any
	}{
		{"empty file", "", nil, map[string]any{}},
		{"yaml", "name: nightly\nlevel: 3\ntarget: {dir: /b, keep: 2}\ntags: [a, b]\nwhen: 2025-01-02\n", nil, map[string]any{
			"name": "nightly", "level": n("3"), "target": map[string]any{"dir": "/b", "keep": n("2")},
			"tags": []any{"a", "b"}, "when": "2025-01-02",
		}},
		{"json", `{"name": "nightly", "ratio": 0.50, "on": true, "none": null}`, nil, map[string]any{
			"name": "nightly", "ratio": n("0.5"), "on": true, "none": nil,
		}},
		{"arguments override", "name: a\ntarget: {dir: /b, keep: 2}\nflat: x\n", []string{"name=b", "target.keep=5", "flat.x=1"}, map[string]any{
			"name": "b", "target": map[string]any{"dir": "/b", "keep": n("5")}, "flat": map[string]any{"x": n("1")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadActionParams([]byte(tt.file), tt.args)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ReadActionParams(%q, %q) = %#v, %v, want %#v", tt.file, tt.args, got, err, tt.want)
			}
		})
	}
	bad := []struct{ name, file, err string }{
		{"a list", "[1, 2]\n", "params file: want a mapping of parameter names to values, got a list"},
		{"text", "backup\n", `params file: want a mapping of parameter names to values, got "backup"`},
		{"malformed", "{a: [\n", "params file: invalid yaml"},
		{"duplicate key", "a: 1\na: 2\n", "params file: a: key appears twice"},
		{"not JSON", "a: .nan\n", `params file: a: ".nan" (!!float) is not a JSON value`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadActionParams([]byte(tt.file), nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
				t.Errorf("ReadActionParams(%q) = %v, want an invalid error %q", tt.file, err, tt.err)
			}
		})
	}
}

func TestSetActionResults(t *testing.T) {
	tests := []struct {
		name    string
		results map[string]any
		args    []string
		want    map[string]any
		err     string
	}{
		{"nothing", nil, nil, map[string]any{}, ""},
		{"values stay text", nil, []string{"count=3", "keys=a,b", "ok=true", "empty="}, map[string]any{
			"count": "3", "keys": "a,b", "ok": "true", "empty": "",
		}, ""},
		{"nesting and merging", map[string]any{"outfile": map[string]any{"name": "x"}, "old": "1"}, []string{"outfile.size=10G", "foo.bar.zab=4", "2fa=y"}, map[string]any{
			"outfile": map[string]any{"name": "x", "size": "10G"}, "old": "1", "foo": map[string]any{"bar": map[string]any{"zab": "4"}}, "2fa": "y",
		}, ""},
		// As in Juju, a later value replaces an earlier one, an object a
		// value and a value an object.
		{"given twice", map[string]any{"a": "1", "b": map[string]any{"c": "2"}}, []string{"a=2", "a=3", "b=4", "d=1", "d.e=5"}, map[string]any{
			"a": "3", "b": "4", "d": map[string]any{"e": "5"},
		}, ""},
		{"reserved", nil, []string{"stdout=x"}, nil, `argument "stdout=x": key "stdout" is reserved`},
		{"reserved nested", nil, []string{"a.stderr-encoding=x"}, nil, `argument "a.stderr-encoding=x": key "stderr-encoding" is reserved`},
		{"uppercase", nil, []string{"Count=1"}, nil, `argument "Count=1": key "Count" is invalid: use lowercase letters, digits and -, starting and ending with a letter or digit, with . between nested keys`},
		{"underscore", nil, []string{"a_b=1"}, nil, `key "a_b" is invalid`},
		{"hyphen last", nil, []string{"a-=1"}, nil, `key "a-" is invalid`},
		{"empty segment", nil, []string{"a..b=1"}, nil, `key "a..b" is invalid`},
		{"no value", nil, []string{"a"}, nil, `argument "a": want KEY=VALUE`},
		{"too large", map[string]any{"a": strings.Repeat("x", MaxResultsSize-20)}, []string{"b=" + strings.Repeat("y", 20)}, nil, "action-set: the results are 65551 bytes as JSON, over the 64 KiB limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := CanonicalJSON(tt.results)
			got, err := SetActionResults(tt.results, tt.args)
			if after, _ := CanonicalJSON(tt.results); string(after) != string(before) {
				t.Errorf("SetActionResults changed its results to %s, was %s", after, before)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
					t.Errorf("SetActionResults(%.60q) = %v, want an invalid error %q", tt.args, err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SetActionResults(%v, %q) = %#v, %v, want %#v", tt.results, tt.args, got, err, tt.want)
			}
		})
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, "null"},
		{map[string]any{}, "{}"},
		{map[string]any{"b": 1, "a": []any{true, nil, "x"}, "c": map[string]any{"z": "<&>", "y": "é\u2028"}}, `{"a":[true,null,"x"],"b":1,"c":{"y":"é\u2028","z":"<&>"}}`},
		// One form for a number, whatever its Go type or JSON spelling.
		{[]any{3, int64(3), uint8(3), 3.0, float32(3), json.Number("3"), json.Number("3.0"), json.Number("0.3e1"), json.Number("30e-1")}, "[3,3,3,3,3,3,3,3,3]"},
		{[]any{1.5, json.Number("1.50"), json.Number("15e-1"), float32(1.5)}, "[1.5,1.5,1.5,1.5]"},
		{[]any{math.Copysign(0, -1), json.Number("-0"), json.Number("-0.0"), 0}, "[0,0,0,0]"},
		{[]any{1e21, json.Number("1e21"), 1e-7, 123456789.0, math.MaxInt64, uint64(math.MaxUint64)}, "[1e+21,1e+21,1e-7,123456789,9223372036854775807,18446744073709551615]"},
		// Integers keep their digits, however many.
		{json.Number("123456789012345678901234567890"), "123456789012345678901234567890"},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON(tt.v)
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalJSON(%#v) = %s, %v, want %s", tt.v, got, err, tt.want)
			continue
		}
		// Stable: decoding the encoding and encoding again gives the same
		// bytes, whether numbers decode as json.Number or as float64 (for
		// integers a float64 holds exactly).
		for _, useNumber := range []bool{true, false} {
			if !useNumber && regexp.MustCompile(`[0-9]{16}`).MatchString(tt.want) {
				continue
			}
			dec := json.NewDecoder(strings.NewReader(string(got)))
			if useNumber {
				dec.UseNumber()
			}
			var back any
			if err := dec.Decode(&back); err != nil {
				t.Fatalf("decode %s: %v", got, err)
			}
			if again, err := CanonicalJSON(back); err != nil || string(again) != string(got) {
				t.Errorf("CanonicalJSON(decode(%s), UseNumber %v) = %s, %v", got, useNumber, again, err)
			}
		}
	}
	for _, v := range []any{math.NaN(), math.Inf(1), json.Number("1e999"), json.Number("0x10"), json.Number("+1"), json.Number(""), "\xff", map[string]any{"\xff": 1}, struct{}{}, []string{"a"}} {
		if got, err := CanonicalJSON(v); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("CanonicalJSON(%#v) = %s, %v, want an invalid error", v, got, err)
		}
	}
}

package charm

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"google.golang.org/protobuf/proto"
)

func str(s string) *pb.ConfigValue   { return toValue(s) }
func num(i int64) *pb.ConfigValue    { return toValue(i) }
func flt(x float64) *pb.ConfigValue  { return toValue(x) }
func boolean(b bool) *pb.ConfigValue { return toValue(b) }

func sameValues(a, b map[string]*pb.ConfigValue) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !proto.Equal(v, w) {
			return false
		}
	}
	return true
}

func valuesString(m map[string]*pb.ConfigValue) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+describeValue(m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

const sampleConfig = `
options:
  port: {type: int, default: 8080, description: the port}
  name: {type: string, default: kv}
  version: {default: "1.10"}
  ratio: {type: float, default: 1}
  scale: {type: float, default: 2.5e3}
  debug: {type: boolean, default: false}
  token: {type: string}
  empty: {type: string, default: ""}
  tls.cert_file: {type: string, extra: ignored}
`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(sampleConfig))
	if err != nil {
		t.Fatalf("ParseConfig(sample) = %v, want no error", err)
	}
	want := map[string]Option{
		"port":          {Type: TypeInt, Default: int64(8080), Description: "the port"},
		"name":          {Type: TypeString, Default: "kv"},
		"version":       {Type: TypeString, Default: "1.10"},
		"ratio":         {Type: TypeFloat, Default: 1.0},
		"scale":         {Type: TypeFloat, Default: 2500.0},
		"debug":         {Type: TypeBoolean, Default: false},
		"token":         {Type: TypeString},
		"empty":         {Type: TypeString, Default: ""},
		"tls.cert_file": {Type: TypeString},
	}
	if !reflect.DeepEqual(c.Options, want) {
		t.Errorf("ParseConfig(sample).Options = %#v, want %#v", c.Options, want)
	}
	wantDefaults := map[string]*pb.ConfigValue{
		"port": num(8080), "name": str("kv"), "version": str("1.10"), "ratio": flt(1),
		"scale": flt(2500), "debug": boolean(false), "empty": str(""),
	}
	if got := c.Defaults(); !sameValues(got, wantDefaults) {
		t.Errorf("Defaults() = %s, want %s", valuesString(got), valuesString(wantDefaults))
	}
	if err := c.Validate(c.Defaults()); err != nil {
		t.Errorf("Validate(Defaults()) = %v, want no error", err)
	}

	for _, in := range []string{"", "~\n", "options:\n", "options: {}\n", "other: 1\n"} {
		c, err := ParseConfig([]byte(in))
		if err != nil || c == nil || len(c.Options) != 0 {
			t.Errorf("ParseConfig(%q) = %+v, %v, want no options", in, c, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"malformed", "options: {port\n", "config.yaml: invalid yaml: line 1: did not find expected ',' or '}'"},
		{"top a list", "- options\n", "config.yaml: want a mapping, got a list"},
		{"options a list", "options: [port]\n", "config.yaml: options: want a mapping, got a list"},
		{"option a string", "options:\n  port: int\n", `config.yaml: options.port: want a mapping, got "int"`},
		{"option name invalid", "options:\n  1Port: {type: int}\n", `config.yaml: options: option name "1Port" is invalid: use letters and digits, starting with a letter, with single - _ or . between them`},
		{"option name with space", "options:\n  'a b': {}\n", `config.yaml: options: option name "a b" is invalid: use letters and digits, starting with a letter, with single - _ or . between them`},
		{"duplicate option", "options:\n  a: {}\n  a: {}\n", "config.yaml: options.a: key appears twice"},
		{"type invalid", "options:\n  port: {type: integer}\n", `config.yaml: options.port.type: "integer" is invalid: want string, int, float or boolean`},
		{"type a list", "options:\n  port: {type: [int]}\n", "config.yaml: options.port.type: want text, got a list"},
		{"description a mapping", "options:\n  port: {description: {a: b}}\n", "config.yaml: options.port.description: want text, got a mapping"},
		{"int default a string", "options:\n  port: {type: int, default: abc}\n", `config.yaml: options.port.default: want an int, got "abc"`},
		{"int default quoted", "options:\n  port: {type: int, default: \"80\"}\n", `config.yaml: options.port.default: want an int, got "80"`},
		{"int default a float", "options:\n  port: {type: int, default: 80.5}\n", `config.yaml: options.port.default: want an int, got "80.5"`},
		{"int default overflows", "options:\n  port: {type: int, default: 9223372036854775808}\n", `config.yaml: options.port.default: want an int, got "9223372036854775808"`},
		{"float default a bool", "options:\n  r: {type: float, default: true}\n", `config.yaml: options.r.default: want a float, got "true"`},
		{"float default nan", "options:\n  r: {type: float, default: .nan}\n", `config.yaml: options.r.default: want a float, got ".nan"`},
		{"float default inf", "options:\n  r: {type: float, default: -.inf}\n", `config.yaml: options.r.default: want a float, got "-.inf"`},
		{"bool default a string", "options:\n  d: {type: boolean, default: \"false\"}\n", `config.yaml: options.d.default: want a boolean (true or false), got "false"`},
		{"bool default yes", "options:\n  d: {type: boolean, default: yes}\n", `config.yaml: options.d.default: want a boolean (true or false), got "yes"`},
		{"string default a number", "options:\n  v: {default: 1.10}\n", "config.yaml: options.v.default: want a string, got 1.10 (quote it)"},
		{"string default a bool", "options:\n  v: {type: string, default: true}\n", "config.yaml: options.v.default: want a string, got true (quote it)"},
		{"string default a list", "options:\n  v: {type: string, default: [a]}\n", "config.yaml: options.v.default: want a string, got a list"},
		{"too big", "options: {}\n#" + strings.Repeat("x", maxYAMLSize) + "\n", "config.yaml: file is over the 1 MiB limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseConfig(%.80q) = %+v, want error %q", tt.yaml, c, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseConfig(%.80q) = %q, want %q", tt.yaml, err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseConfig(%.80q) = %v, want an error matching ErrInvalid", tt.yaml, err)
			}
		})
	}
}

func TestParseConfigAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("big: &b\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "  k%d: x\n", i)
	}
	b.WriteString("options:\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "  o%d: *b\n", i)
	}
	_, err := ParseConfig([]byte(b.String()))
	if want := "aliases expand the file"; err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseConfig(alias bomb) = %v, want %q", err, want)
	}
}

// TestParseConfigAliasedDefaults has aliases stand for one long default in
// many options: a file a few hundred bytes compressed whose options,
// written out, are megabytes, too large to store. It is refused, naming
// the limit, as the same file written out would be.
func TestParseConfigAliasedDefaults(t *testing.T) {
	tests := []struct {
		name    string
		long    int // bytes of the aliased default
		options int
		wantErr bool
	}{
		{"within the limit", 4 << 10, 100, false},
		{"past the limit", 60 << 10, 100, true},
		{"one alias past the limit", maxYAMLSize - 100, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			fmt.Fprintf(&b, "long: &l %q\noptions:\n", strings.Repeat("a", tt.long))
			for i := range tt.options {
				fmt.Fprintf(&b, "  o%d: {default: *l}\n", i)
			}
			c, err := ParseConfig([]byte(b.String()))
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("ParseConfig(%d options aliasing %d bytes) = %v, want no error", tt.options, tt.long, err)
				}
				if len(c.Options) != tt.options {
					t.Errorf("ParseConfig(%d options aliasing %d bytes) has %d options, want %d", tt.options, tt.long, len(c.Options), tt.options)
				}
				return
			}
			want := "aliases expand the file past the 1 MiB limit of a file"
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseConfig(%d options aliasing %d bytes) = %v, want %q", tt.options, tt.long, err, want)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	c, err := ParseConfig([]byte(sampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		settings map[string]string
		want     map[string]*pb.ConfigValue
		err      string
	}{
		{name: "none", settings: nil, want: map[string]*pb.ConfigValue{}},
		{
			name:     "every type",
			settings: map[string]string{"port": "9090", "name": "a=b c", "ratio": "0.25", "scale": "3", "debug": "true", "token": ""},
			want: map[string]*pb.ConfigValue{
				"port": num(9090), "name": str("a=b c"), "ratio": flt(0.25), "scale": flt(3), "debug": boolean(true), "token": str(""),
			},
		},
		{name: "negative int", settings: map[string]string{"port": "-1"}, want: map[string]*pb.ConfigValue{"port": num(-1)}},
		{name: "bool forms", settings: map[string]string{"debug": "0"}, want: map[string]*pb.ConfigValue{"debug": boolean(false)}},
		{name: "float exponent", settings: map[string]string{"ratio": "1e-3"}, want: map[string]*pb.ConfigValue{"ratio": flt(0.001)}},
		{name: "unknown", settings: map[string]string{"prot": "1"}, err: `unknown config option "prot"`},
		{name: "int not a number", settings: map[string]string{"port": "abc"}, err: `config option "port" wants an int, got "abc"`},
		{name: "int empty", settings: map[string]string{"port": ""}, err: `config option "port" wants an int, got ""`},
		{name: "int a float", settings: map[string]string{"port": "1.5"}, err: `config option "port" wants an int, got "1.5"`},
		{name: "int in hex", settings: map[string]string{"port": "0x50"}, err: `config option "port" wants an int, got "0x50"`},
		{name: "int overflow", settings: map[string]string{"port": "9223372036854775808"}, err: `config option "port" wants an int, got "9223372036854775808"`},
		{name: "float word", settings: map[string]string{"ratio": "half"}, err: `config option "ratio" wants a float, got "half"`},
		{name: "float nan", settings: map[string]string{"ratio": "NaN"}, err: `config option "ratio" wants a float, got "NaN"`},
		{name: "float inf", settings: map[string]string{"ratio": "1e400"}, err: `config option "ratio" wants a float, got "1e400"`},
		{name: "bool word", settings: map[string]string{"debug": "yes"}, err: `config option "debug" wants a boolean (true or false), got "yes"`},
		{name: "first bad key in order", settings: map[string]string{"zz": "1", "port": "x"}, err: `config option "port" wants an int, got "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.ParseValues(tt.settings)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid) {
					t.Errorf("ParseValues(%v) = %s, %v, want error %q", tt.settings, valuesString(got), err, tt.err)
				}
				return
			}
			if err != nil || !sameValues(got, tt.want) {
				t.Errorf("ParseValues(%v) = %s, %v, want %s", tt.settings, valuesString(got), err, valuesString(tt.want))
			}
		})
	}

	var none *Config
	if got := none.Defaults(); len(got) != 0 {
		t.Errorf("(*Config)(nil).Defaults() = %s, want none", valuesString(got))
	}
	if _, err := none.ParseValues(map[string]string{"a": "b"}); err == nil {
		t.Errorf("(*Config)(nil).ParseValues(a=b) = nil, want an error")
	}
}

func TestValidate(t *testing.T) {
	c, err := ParseConfig([]byte(sampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		values map[string]*pb.ConfigValue
		err    string
	}{
		{name: "ok", values: map[string]*pb.ConfigValue{"port": num(1), "ratio": flt(2), "debug": boolean(true), "name": str("x")}},
		{name: "unknown", values: map[string]*pb.ConfigValue{"nope": num(1)}, err: `unknown config option "nope"`},
		{name: "int for float", values: map[string]*pb.ConfigValue{"ratio": num(1)}, err: `config option "ratio" wants a float, got 1`},
		{name: "string for int", values: map[string]*pb.ConfigValue{"port": str("80")}, err: `config option "port" wants an int, got "80"`},
		{name: "unset", values: map[string]*pb.ConfigValue{"port": {}}, err: `config option "port" wants an int, got no value`},
		{name: "nil", values: map[string]*pb.ConfigValue{"port": nil}, err: `config option "port" wants an int, got no value`},
		{name: "nan", values: map[string]*pb.ConfigValue{"ratio": flt(math.NaN())}, err: `config option "ratio" wants a float, got NaN`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Validate(tt.values)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("Validate(%s) = %v, want no error", valuesString(tt.values), err)
			case tt.err != "" && (err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid)):
				t.Errorf("Validate(%s) = %v, want %q", valuesString(tt.values), err, tt.err)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	c, err := ParseConfig([]byte("options:\n  a: {type: int, default: 1}\n  b: {type: int, default: 2}\n  c: {type: int}\n"))
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]*pb.ConfigValue{"b": num(20), "c": num(30)}
	want := map[string]*pb.ConfigValue{"a": num(1), "b": num(20), "c": num(30)}
	if got := c.WithDefaults(set); !sameValues(got, want) {
		t.Errorf("WithDefaults(%s) = %s, want %s", valuesString(set), valuesString(got), valuesString(want))
	}
	if len(set) != 2 {
		t.Errorf("WithDefaults modified its argument: %s", valuesString(set))
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		v    *pb.ConfigValue
		typ  string
		want string
	}{
		{str("hello world"), TypeString, "hello world"},
		{str(""), TypeString, ""},
		{num(-42), TypeInt, "-42"},
		{num(math.MaxInt64), TypeInt, "9223372036854775807"},
		{flt(0.1), TypeFloat, "0.1"},
		{flt(3), TypeFloat, "3"},
		{flt(1e21), TypeFloat, "1e+21"},
		{flt(-2.5e-10), TypeFloat, "-2.5e-10"},
		{boolean(true), TypeBoolean, "true"},
		{boolean(false), TypeBoolean, "false"},
		{nil, TypeString, ""},
		{&pb.ConfigValue{}, TypeString, ""},
	}
	for _, tt := range tests {
		got := FormatValue(tt.v)
		if got != tt.want {
			t.Errorf("FormatValue(%v) = %q, want %q", tt.v, got, tt.want)
		}
		if tt.v.GetValue() == nil {
			continue
		}
		back, err := parseValue(tt.typ, got)
		if err != nil || !proto.Equal(back, tt.v) {
			t.Errorf("parseValue(%s, %q) = %v, %v, want %v", tt.typ, got, back, err, tt.v)
		}
	}
}

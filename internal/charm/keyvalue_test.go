package charm

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseKeyValues(t *testing.T) {
	tests := []struct {
		args []string
		want map[string]string
		err  string
	}{
		{args: nil, want: map[string]string{}},
		{args: []string{"port=8080"}, want: map[string]string{"port": "8080"}},
		{args: []string{"a=", "b=x=y", "c==", "d= spaced "}, want: map[string]string{"a": "", "b": "x=y", "c": "=", "d": " spaced "}},
		{args: []string{"tls.cert_file=/etc/x", "max-conns=3", "a1=b"}, want: map[string]string{"tls.cert_file": "/etc/x", "max-conns": "3", "a1": "b"}},
		{args: []string{"port"}, err: `argument "port": want KEY=VALUE`},
		{args: []string{""}, err: `argument "": want KEY=VALUE`},
		{args: []string{"=8080"}, err: `argument "=8080": the key is empty`},
		{args: []string{"1port=1"}, err: `argument "1port=1": key "1port" is invalid: use letters and digits, starting with a letter, with single - _ or . between them`},
		{args: []string{"a b=1"}, err: `argument "a b=1": key "a b" is invalid: use letters and digits, starting with a letter, with single - _ or . between them`},
		{args: []string{"a-=1"}, err: `argument "a-=1": key "a-" is invalid: use letters and digits, starting with a letter, with single - _ or . between them`},
		{args: []string{"a..b=1"}, err: `argument "a..b=1": key "a..b" is invalid: use letters and digits, starting with a letter, with single - _ or . between them`},
		{args: []string{"a=1", "b=2", "a=3"}, err: `argument "a=3": key "a" is given twice`},
	}
	for _, tt := range tests {
		got, err := ParseKeyValues(tt.args)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseKeyValues(%q) = %v, %v, want error %q", tt.args, got, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseKeyValues(%q) = %v, %v, want %v", tt.args, got, err, tt.want)
		}
	}
}

func TestValidOptionName(t *testing.T) {
	long := "a"
	for len(long) < 64 {
		long += "b"
	}
	tests := map[string]bool{
		"a": true, "port": true, "max-conns": true, "tls.cert_file": true, "a1": true, "v2.x": true,
		"A": true, "Server": true, "PidFile": true, "ListenIP": true,
		"": false, "1a": false, "-a": false, "a-": false, "a--b": false, "a b": false, "a/b": false,
		"é": false, long: false, long[:63]: true,
	}
	for name, want := range tests {
		if got := ValidOptionName(name); got != want {
			t.Errorf("ValidOptionName(%q) = %v, want %v", name, got, want)
		}
	}
}

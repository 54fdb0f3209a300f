package names

import (
	"regexp"
	"strings"
	"testing"
)

// The rules as regular expressions: what ValidService, ValidEndpoint and
// the numbers of ValidMachine and ValidUnit must agree with.
var (
	serviceRE  = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]*[a-z][a-z0-9]*)*$`)
	endpointRE = regexp.MustCompile(`^[a-z][a-z0-9]*([-_][a-z0-9]+)*$`)
	numberRE   = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})$`)
)

func checkAgainstRules(t *testing.T, s string) {
	t.Helper()
	if got, want := ValidService(s), len(s) <= 63 && serviceRE.MatchString(s); got != want {
		t.Errorf("ValidService(%q) = %v, want %v", s, got, want)
	}
	if got, want := ValidEndpoint(s), len(s) <= 63 && endpointRE.MatchString(s); got != want {
		t.Errorf("ValidEndpoint(%q) = %v, want %v", s, got, want)
	}
	if got, want := ValidMachine(s), numberRE.MatchString(s); got != want {
		t.Errorf("ValidMachine(%q) = %v, want %v", s, got, want)
	}
	svc, n, ok := strings.Cut(s, "/")
	if got, want := ValidUnit(s), ok && len(svc) <= 63 && serviceRE.MatchString(svc) && numberRE.MatchString(n); got != want {
		t.Errorf("ValidUnit(%q) = %v, want %v", s, got, want)
	}
}

// Every string of up to four characters from an alphabet of the rules'
// kinds of character agrees with the regular expressions.
func TestRulesAgreeWithTheirRegularExpressions(t *testing.T) {
	const alphabet = "az09-_/A. \n"
	var walk func(prefix string, n int)
	walk = func(prefix string, n int) {
		checkAgainstRules(t, prefix)
		if n == 0 {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			walk(prefix+alphabet[i:i+1], n-1)
		}
	}
	walk("", 4)
	for _, s := range []string{
		"kv", "kv-2", "kv-2a", "my-app/12", "a" + strings.Repeat("b", 62), "a" + strings.Repeat("b", 63),
		"123456789012345678", "1234567890123456789", "kv/123456789012345678", "kv/01", "db_admin", "db__admin", "é",
	} {
		checkAgainstRules(t, s)
	}
}

func FuzzRulesAgreeWithTheirRegularExpressions(f *testing.F) {
	for _, s := range []string{"kv", "kv-2", "app/0", "db_x", "0", "-a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkAgainstRules(t, s) })
}

func BenchmarkValidUnit(b *testing.B) {
	for b.Loop() {
		if !ValidUnit("bench/1234") {
			b.Fatal("invalid")
		}
	}
}

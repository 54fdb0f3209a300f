package hostexec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestParsePackageManager(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want PackageManager
		err  bool
	}{
		{"apt", Apt{}, false},
		{"none", None{}, false},
		{"exec:/usr/bin/pm", Exec{Path: "/usr/bin/pm"}, false},
		{"exec:pm", nil, true},
		{"yum", nil, true},
		{"", nil, true},
	} {
		got, err := ParsePackageManager(tc.flag)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParsePackageManager(%q) = %v, %v; want %v, error %v", tc.flag, got, err, tc.want, tc.err)
		}
	}
	if err := (None{}).Install(context.Background(), []Package{{Name: "x"}}); !errors.Is(err, ErrNoPackageManager) {
		t.Errorf("None.Install = %v, want ErrNoPackageManager", err)
	}
}

func TestPackageMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, installed string
		want               bool
	}{
		{"", "1.0", true},
		{"", "", false},
		{"1.2.3", "1.2.3", true},
		{"1.2.3", "1.2.30", false},
		{"1.2.*", "1.2.10-1", true},
		{"1.2.*", "1.3.0", false},
		{"1.?", "1.5", true},
		{"1.2.*", "", false},
	} {
		if got := (Package{Name: "p", Version: tc.pattern}).Matches(tc.installed); got != tc.want {
			t.Errorf("Package{Version: %q}.Matches(%q) = %v, want %v", tc.pattern, tc.installed, got, tc.want)
		}
	}
	for _, bad := range []Package{{Name: ""}, {Name: "-rf"}, {Name: "a b"}, {Name: "a=1"}, {Name: "p", Version: "[1"}, {Name: "p", Version: "1 2"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil, want an error", bad)
		}
	}
}

func TestExecPackageManager(t *testing.T) {
	ctx := context.Background()
	pm, _ := fakepkg(t)
	got, err := pm.Query(ctx, []string{"a", "b"})
	if want := map[string]string{"a": "", "b": ""}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("Query(a, b) = %v, %v; want %v", got, err, want)
	}
	if err := pm.Install(ctx, []Package{{Name: "a", Version: "2.0"}, {Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	got, err = pm.Query(ctx, []string{"a", "b", "c"})
	if want := map[string]string{"a": "2.0", "b": "1.0", "c": ""}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("Query(a, b, c) = %v, %v; want %v", got, err, want)
	}
	if err := pm.Remove(ctx, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	got, err = pm.Query(ctx, []string{"a", "b"})
	if want := map[string]string{"a": "", "b": "1.0"}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("Query(a, b) after removing a = %v, %v; want %v", got, err, want)
	}
	t.Setenv("FAKEPKG_FAIL", "bad")
	err = pm.Install(ctx, []Package{{Name: "bad"}})
	var te *ToolError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "failing as FAKEPKG_FAIL asks") {
		t.Errorf("Install(bad) = %v, want a ToolError quoting the tool", err)
	}
	if err := pm.Install(ctx, []Package{{Name: "-x"}}); err == nil {
		t.Errorf("Install(-x) = nil, want an error")
	}
}

// TestExecConcurrent installs from many goroutines at once: fakepkg's
// lock keeps every install.
func TestExecConcurrent(t *testing.T) {
	ctx := context.Background()
	pm, _ := fakepkg(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	var names []string
	for i := range errs {
		names = append(names, fmt.Sprintf("p%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pm.Install(ctx, []Package{{Name: fmt.Sprintf("p%d", i)}})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := pm.Query(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if got[n] != "1.0" {
			t.Errorf("after concurrent installs, %s = %q, want 1.0", n, got[n])
		}
	}
}

// fakepkgLog returns the installs and removes fakepkg logged.
func fakepkgLog(t *testing.T, db string) []string {
	t.Helper()
	data, err := os.ReadFile(db + ".log")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(data)), " ", "_"))
}

func TestPackagesSharedClaim(t *testing.T) {
	ctx := context.Background()
	pm, db := fakepkg(t)
	if err := pm.Install(ctx, []Package{{Name: "pre", Version: "0.9"}}); err != nil {
		t.Fatal(err)
	}
	pk := NewPackages(t.TempDir(), pm)
	step := func(what string, changed bool, err error, want bool) {
		t.Helper()
		if err != nil || changed != want {
			t.Fatalf("%s = %v, %v; want %v, nil", what, changed, err, want)
		}
	}
	changed, err := pk.Claim(ctx, "kv/0", []Package{{Name: "shared", Version: "1.*"}, {Name: "pre"}})
	step("Claim(kv/0, shared, pre)", changed, err, true)
	changed, err = pk.Claim(ctx, "kv/0", []Package{{Name: "shared", Version: "1.*"}, {Name: "pre"}})
	step("Claim(kv/0) again", changed, err, false)
	changed, err = pk.Claim(ctx, "app/0", []Package{{Name: "shared"}, {Name: "pre"}})
	step("Claim(app/0, shared, pre)", changed, err, false)
	changed, err = pk.Release(ctx, "kv/0", []string{"shared", "pre"})
	step("Release(kv/0)", changed, err, false)
	got, _ := pm.Query(ctx, []string{"shared", "pre"})
	if want := map[string]string{"shared": "1.0", "pre": "0.9"}; !maps.Equal(got, want) {
		t.Fatalf("after kv/0 released, installed = %v, want %v", got, want)
	}
	changed, err = pk.Release(ctx, "app/0", []string{"shared", "pre"})
	step("Release(app/0)", changed, err, true)
	got, _ = pm.Query(ctx, []string{"shared", "pre"})
	if want := map[string]string{"shared": "", "pre": "0.9"}; !maps.Equal(got, want) {
		t.Fatalf("after the last claimant released, installed = %v, want %v (pre was there before)", got, want)
	}
	if got, want := fakepkgLog(t, db), []string{"install_pre_0.9", "install_shared_1.0", "remove_shared"}; !equalStrings(got, want) {
		t.Errorf("fakepkg did %v, want %v", got, want)
	}
	changed, err = pk.Release(ctx, "app/0", []string{"shared"})
	step("Release(app/0) again", changed, err, false)
}

// TestPackagesWrongVersion: an installed package whose version the
// pattern does not match is installed at the version asked for; a glob
// the manager's candidate does not match fails the claim.
func TestPackagesWrongVersion(t *testing.T) {
	ctx := context.Background()
	pm, _ := fakepkg(t)
	pk := NewPackages(t.TempDir(), pm)
	if _, err := pk.Claim(ctx, "a/0", []Package{{Name: "p", Version: "1.0"}}); err != nil {
		t.Fatal(err)
	}
	if changed, err := pk.Claim(ctx, "b/0", []Package{{Name: "p", Version: "2.0"}}); err != nil || !changed {
		t.Fatalf("Claim(p=2.0) = %v, %v; want true, nil", changed, err)
	}
	if got, _ := pm.Query(ctx, []string{"p"}); got["p"] != "2.0" {
		t.Errorf("p = %q, want 2.0", got["p"])
	}
	if _, err := pk.Claim(ctx, "b/0", []Package{{Name: "q", Version: "3.*"}}); err == nil || !strings.Contains(err.Error(), `installed "1.0", want "3.*"`) {
		t.Errorf("Claim(q=3.*) with candidate 1.0 = %v, want a mismatch error", err)
	}
}

// TestPackagesCrashSafe: a claim whose install failed stays recorded (a
// retry installs it), and a removal that failed is finished by the next
// Release without removing twice (fakepkg fails removing an absent
// package).
func TestPackagesCrashSafe(t *testing.T) {
	ctx := context.Background()
	pm, db := fakepkg(t)
	dir := t.TempDir()
	t.Setenv("FAKEPKG_FAIL", "p")
	if _, err := NewPackages(dir, pm).Claim(ctx, "a/0", []Package{{Name: "p"}}); err == nil {
		t.Fatal("Claim with a failing install = nil error")
	}
	t.Setenv("FAKEPKG_FAIL", "")
	pk := NewPackages(dir, pm) // a new agent, reading the record
	if claimed, _ := pk.Claimed("a/0"); claimed["p"] != "" || len(claimed) != 1 {
		t.Fatalf("Claimed(a/0) after a failed install = %v, want p", claimed)
	}
	if changed, err := pk.Claim(ctx, "a/0", []Package{{Name: "p"}}); err != nil || !changed {
		t.Fatalf("Claim again = %v, %v; want true, nil", changed, err)
	}
	t.Setenv("FAKEPKG_FAIL", "p")
	if _, err := pk.Release(ctx, "a/0", []string{"p"}); err == nil {
		t.Fatal("Release with a failing remove = nil error")
	}
	t.Setenv("FAKEPKG_FAIL", "")
	pk = NewPackages(dir, pm)
	if changed, err := pk.Release(ctx, "a/0", []string{"p"}); err != nil || !changed {
		t.Fatalf("Release again = %v, %v; want true, nil", changed, err)
	}
	if changed, err := pk.Release(ctx, "a/0", []string{"p"}); err != nil || changed {
		t.Fatalf("Release a third time = %v, %v; want false, nil", changed, err)
	}
	if got, want := fakepkgLog(t, db), []string{"install_p_1.0", "remove_p"}; !equalStrings(got, want) {
		t.Errorf("fakepkg did %v, want %v", got, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

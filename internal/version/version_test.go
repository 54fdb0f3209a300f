package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{GoVersion: "go1.99.0", Main: debug.Module{Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name          string
		v, c, d       string
		read          func() (*debug.BuildInfo, bool)
		want          Info
		wantGoVersion string
	}{
		{name: "stamped", v: "v1.2.3", c: "abc", d: "2026-01-02T03:04:05Z", read: vcs("(devel)", "vcs.revision", "def"),
			want: Info{Version: "v1.2.3", Commit: "abc", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.99.0"}},
		{name: "unstamped with vcs", read: vcs("(devel)", "vcs.revision", "def", "vcs.time", "2026-02-03T00:00:00Z", "vcs.modified", "true"),
			want: Info{Version: Devel, Commit: "def-dirty", Date: "2026-02-03T00:00:00Z", GoVersion: "go1.99.0"}},
		{name: "module version", read: vcs("v0.4.0"), want: Info{Version: "v0.4.0", GoVersion: "go1.99.0"}},
		{name: "nothing", read: none, want: Info{Version: Devel, GoVersion: runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.v, tc.c, tc.d, tc.read)
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v1.0.0", Commit: "0123456789abcdef0123", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := i.String(), "v1.0.0 (commit 0123456789ab, built 2026-01-02T03:04:05Z, go1.26.8 linux/amd64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	i = Info{Version: Devel, GoVersion: "go1.26.8", Platform: "linux/amd64"}
	if got, want := i.String(), "devel (commit unknown, built unknown, go1.26.8 linux/amd64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

package unitagent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// charmAPI serves one charm archive to DownloadCharm, failing the calls
// while fail is set; the rest of API is left nil.
type charmAPI struct {
	API
	archive []byte
	fail    bool
}

func (c *charmAPI) DownloadCharm(context.Context, *pb.DownloadCharmRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[pb.DownloadCharmResponse], error) {
	if c.fail {
		return nil, errors.New("controller away")
	}
	return &chunks{data: c.archive}, nil
}

type chunks struct {
	grpc.ClientStream
	data []byte
}

func (s *chunks) Recv() (*pb.DownloadCharmResponse, error) {
	if len(s.data) == 0 {
		return nil, io.EOF
	}
	resp := &pb.DownloadCharmResponse{Chunk: s.data}
	s.data = nil
	return resp, nil
}

// packedCharm is a charm archive of a metadata.yaml and, withHooks, an
// install hook.
func packedCharm(t *testing.T, withHooks bool) []byte {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "metadata.yaml"), []byte("name: app\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if withHooks {
		if err := os.Mkdir(filepath.Join(src, "hooks"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "hooks", "install"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := charm.Pack(src, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newDownloadAgent(t *testing.T, dir string, api API, cache *charm.Cache) *Agent {
	t.Helper()
	a, err := New(Config{Unit: "app/0", DataDir: dir, API: api, HookLock: make(chan struct{}, 1), Charms: cache})
	if err != nil {
		t.Fatal(err)
	}
	if a.l, err = a.store.load(); err != nil {
		t.Fatal(err)
	}
	return a
}

// entries lists what dir holds, by name.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// TestFirstDownloadInPlace: a unit whose directory its agent just made
// (parents too) unpacks its first charm straight into place, with the
// machine's cache or without; an agent over a directory that was there
// unpacks beside it and replaces, as before.
func TestFirstDownloadInPlace(t *testing.T) {
	ref := &pb.CharmRef{Name: "app", Revision: 1}
	for _, withCache := range []bool{false, true} {
		root := t.TempDir()
		var cache *charm.Cache
		if withCache {
			cache = charm.NewCache(filepath.Join(root, "cache"))
		}
		api := &charmAPI{archive: packedCharm(t, true)}
		dir := filepath.Join(root, "units", "app-0")
		a := newDownloadAgent(t, dir, api, cache)
		if !a.newDir {
			t.Fatalf("cache %v: a directory just made is not new", withCache)
		}
		ex := &executor{a: a}
		if err := ex.download(context.Background(), ref); err != nil {
			t.Fatalf("cache %v: %v", withCache, err)
		}
		if a.newDir {
			t.Errorf("cache %v: still new after a download", withCache)
		}
		if got := entries(t, dir); len(got) != 1 || got[0] != "charm" {
			t.Errorf("cache %v: the unit's directory holds %v, want [charm]", withCache, got)
		}
		if _, err := os.Stat(filepath.Join(dir, "charm", "metadata.yaml")); err != nil {
			t.Errorf("cache %v: %v", withCache, err)
		}
		if a.l.Charm != "app/1" {
			t.Errorf("cache %v: charm recorded %q, want app/1", withCache, a.l.Charm)
		}

		// The same directory again, as after a restart: not new, and
		// a download replaces the charm there.
		b := newDownloadAgent(t, dir, api, cache)
		if b.newDir {
			t.Fatalf("cache %v: a directory that was there is new", withCache)
		}
		if err := (&executor{a: b}).download(context.Background(), ref); err != nil {
			t.Fatalf("cache %v: %v", withCache, err)
		}
		if got := entries(t, dir); len(got) != 1 || got[0] != "charm" {
			t.Errorf("cache %v: after the second download the unit's directory holds %v, want [charm]", withCache, got)
		}
	}
}

// TestFirstDownloadCutShort: when the first download fails, the next one
// goes the way of replacing, so that what a try cut short left in the
// charm's directory does not stay.
func TestFirstDownloadCutShort(t *testing.T) {
	ref := &pb.CharmRef{Name: "app", Revision: 1}
	api := &charmAPI{archive: packedCharm(t, true), fail: true}
	dir := filepath.Join(t.TempDir(), "app-0")
	a := newDownloadAgent(t, dir, api, nil)
	ex := &executor{a: a}
	if err := ex.download(context.Background(), ref); err == nil {
		t.Fatal("a failed fetch downloaded")
	}
	// What a try cut short after it began to unpack would leave.
	if err := os.MkdirAll(filepath.Join(a.charmDir(), "partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	api.fail = false
	if err := ex.download(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, a.charmDir()); len(got) != 2 || got[0] != "hooks" || got[1] != "metadata.yaml" {
		t.Errorf("the charm's directory holds %v, want [hooks metadata.yaml]", got)
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "charm" {
		t.Errorf("the unit's directory holds %v, want [charm]", got)
	}
}

// TestNewOverAFile: a unit directory that is a file is refused.
func TestNewOverAFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "app-0")
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Unit: "app/0", DataDir: dir, API: &charmAPI{}, HookLock: make(chan struct{}, 1)}); err == nil {
		t.Fatal("New over a file succeeded")
	}
}

// TestHooklessCharmNotUnpacked: a charm without hooks gives the unit no
// charm directory (nor a directory of its own, which nothing else made),
// with the machine's cache or without, and every hook of it is missing; a
// charm with hooks after it is unpacked as usual, the unit's directory
// made for it, and one without after that removes it.
func TestHooklessCharmNotUnpacked(t *testing.T) {
	for _, withCache := range []bool{false, true} {
		root := t.TempDir()
		var cache *charm.Cache
		if withCache {
			cache = charm.NewCache(filepath.Join(root, "cache"))
		}
		dir := filepath.Join(root, "units", "app-0")
		hookless := &charmAPI{archive: packedCharm(t, false)}
		a := newDownloadAgent(t, dir, hookless, cache)
		if err := (&executor{a: a}).download(context.Background(), &pb.CharmRef{Name: "app", Revision: 1}); err != nil {
			t.Fatalf("cache %v: %v", withCache, err)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("cache %v: the unit of a charm without hooks has a directory (%v), want none", withCache, err)
		}
		if a.l.Charm != "app/1" {
			t.Errorf("cache %v: charm recorded %q, want app/1", withCache, a.l.Charm)
		}
		if a.hasHook("install") {
			t.Errorf("cache %v: a charm without hooks has an install hook", withCache)
		}

		// Upgraded to a charm with hooks: unpacked.
		b := newDownloadAgent(t, dir, &charmAPI{archive: packedCharm(t, true)}, cache)
		if err := (&executor{a: b}).download(context.Background(), &pb.CharmRef{Name: "app", Revision: 2}); err != nil {
			t.Fatalf("cache %v: %v", withCache, err)
		}
		if got := entries(t, b.charmDir()); len(got) != 2 {
			t.Errorf("cache %v: the charm with hooks unpacked as %v, want [hooks metadata.yaml]", withCache, got)
		}
		if !b.hasHook("install") {
			t.Errorf("cache %v: the charm with hooks has no install hook", withCache)
		}

		// And back to one without: its directory goes.
		c := newDownloadAgent(t, dir, hookless, cache)
		if err := (&executor{a: c}).download(context.Background(), &pb.CharmRef{Name: "app", Revision: 3}); err != nil {
			t.Fatalf("cache %v: %v", withCache, err)
		}
		if got := entries(t, dir); len(got) != 0 {
			t.Errorf("cache %v: after a charm without hooks again the unit holds %v, want nothing", withCache, got)
		}
	}
}

// TestDirectoryMadeOnFirstWrite: no agent makes its unit's directory as it
// starts. A new unit's agent (Config.New) does not look for it and takes
// itself as fresh; another takes an absent directory as empty but not
// fresh (it may have run before without writing). The first save makes
// the directory, its parents too, readable by its owner alone.
func TestDirectoryMadeOnFirstWrite(t *testing.T) {
	for _, isNew := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "units", "app-0")
		a, err := New(Config{Unit: "app/0", DataDir: dir, API: &charmAPI{}, HookLock: make(chan struct{}, 1), New: isNew})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Fatalf("new %v: New made the directory (%v)", isNew, err)
		}
		if !a.newDir || a.fresh != isNew {
			t.Errorf("new %v: empty %v, fresh %v; want true, %v", isNew, a.newDir, a.fresh, isNew)
		}
		if a.l, err = a.store.load(); err != nil {
			t.Fatal(err)
		}
		a.l.State = StateReady
		if err := a.store.commit(a.l, commitSynced); err != nil {
			t.Fatalf("new %v: %v", isNew, err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatalf("new %v: %v", isNew, err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("new %v: the directory's mode is %v, want 0700", isNew, fi.Mode().Perm())
		}
		if got := entries(t, dir); len(got) != 1 || got[0] != journalName {
			t.Errorf("new %v: the directory holds %v, want [%s]", isNew, got, journalName)
		}
		// Over the directory now there: neither empty nor fresh.
		b, err := New(Config{Unit: "app/0", DataDir: dir, API: &charmAPI{}, HookLock: make(chan struct{}, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if b.newDir || b.fresh {
			t.Errorf("new %v: over a directory there, empty %v, fresh %v; want false, false", isNew, b.newDir, b.fresh)
		}
		if b.l, err = b.store.load(); err != nil || b.l.State != StateReady {
			t.Errorf("new %v: loaded %v, %v; want the saved state", isNew, b.l, err)
		}
	}
}

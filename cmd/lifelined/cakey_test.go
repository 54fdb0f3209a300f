package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
	"github.com/lifelinehq/lifeline/state"
)

// newCAState starts an etcd of the test's own and returns a State of a
// model on it.
func newCAState(t *testing.T) (*state.State, context.Context) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-ca-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := embedetcd.Start(embedetcd.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := state.New(c, state.Config{Namespace: "/ca/"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return st, ctx
}

// setup is a controller's caSetup with its own data directory under root
// and its log in logs.
func setup(st *state.State, root, name string, logs *syncbuf.Buffer) *caSetup {
	return &caSetup{st: st, dir: filepath.Join(root, name, "pki"),
		logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}).With("controller", name)}
}

// openStored opens the model's stored CA key with the KEK in dir.
func openStored(t *testing.T, ctx context.Context, st *state.State, dir string) (*pki.CA, error) {
	t.Helper()
	stored, err := st.ModelCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kek, ok, err := pki.LoadKEK(dir)
	if err != nil || !ok {
		t.Fatalf("LoadKEK(%s) = %t, %v", dir, ok, err)
	}
	return pki.OpenCA(stored.Cert, stored.Key, kek)
}

// The model's first controller stores its CA with the key sealed, keeps
// the KEK in its data directory, and finds both again when it restarts.
func TestCASetupFirstAndRestart(t *testing.T) {
	st, ctx := newCAState(t)
	root := t.TempDir()
	logs := &syncbuf.Buffer{}
	a := setup(st, root, "a", logs)
	ca, kek, err := a.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kek.IsZero() {
		t.Fatalf("the first controller holds no KEK")
	}
	stored, err := st.ModelCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !pki.IsSealedKey(stored.Key) || bytes.Contains(stored.Key, []byte("PRIVATE KEY")) {
		t.Errorf("the stored CA key is not sealed:\n%s", stored.Key)
	}
	if fi, err := os.Stat(filepath.Join(a.dir, pki.KEKFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the KEK file: %v, %v; want mode 0600", fi, err)
	}
	opened, err := openStored(t, ctx, st, a.dir)
	if err != nil || !bytes.Equal(opened.CertPEM(), ca.CertPEM()) {
		t.Fatalf("the stored key opened with the data directory's KEK: %v", err)
	}

	again, kek2, err := setup(st, root, "a", logs).run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := st.ModelCA(ctx)
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) || kek2 != kek || after.KeyRevision != stored.KeyRevision {
		t.Errorf("restarted: same CA %t, same KEK %t, key rewritten %t; want the same, untouched",
			bytes.Equal(again.CertPEM(), ca.CertPEM()), kek2 == kek, after.KeyRevision != stored.KeyRevision)
	}
}

// writeToken writes a join token of the model's to a file.
func writeToken(t *testing.T, ctx context.Context, st *state.State, expires time.Time) string {
	t.Helper()
	stored, err := st.ModelCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := pki.NewControllerJoin([]string{"127.0.0.1:1"}, stored.Cert, expires)
	if err != nil {
		t.Fatal(err)
	}
	text, err := j.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A controller that joins needs a join token: without one it stops with
// one line saying what to do; with one it keeps the KEK it receives and
// the model's CA, and a restart does not use the token again.
func TestCASetupJoin(t *testing.T) {
	st, ctx := newCAState(t)
	root := t.TempDir()
	logs := &syncbuf.Buffer{}
	ca, kekA, err := setup(st, root, "a", logs).run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	joins := 0
	give := func(k pki.KEK) func(context.Context, pki.ControllerJoin, state.StoredCA) (pki.KEK, error) {
		return func(context.Context, pki.ControllerJoin, state.StoredCA) (pki.KEK, error) { joins++; return k, nil }
	}
	wrong, _ := pki.NewKEK()

	b := setup(st, root, "b", logs)
	if _, _, err := b.run(ctx); !errors.Is(err, errNeedJoin) {
		t.Fatalf("joining without a token = %v, want %v", err, errNeedJoin)
	}
	if msg := errNeedJoin.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "ctl add-controller") || !strings.Contains(msg, "--join-file") {
		t.Errorf("the error without a token is %q: want one line naming ctl add-controller and --join-file", msg)
	}
	if _, err := os.Stat(filepath.Join(b.dir, pki.CACertFile)); err == nil {
		t.Errorf("a refused controller left a CA in its data directory")
	}

	other, _ := pki.NewCA("another model", time.Hour)
	otherJoin, _, _ := pki.NewControllerJoin([]string{"127.0.0.1:1"}, other.CertPEM(), time.Now().Add(time.Hour))
	otherText, _ := otherJoin.Encode()
	otherPath := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(otherPath, []byte(otherText), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		token string
		kek   pki.KEK
		want  string
	}{
		{"expired", writeToken(t, ctx, st, time.Now().Add(-time.Second)), kekA, "the join token expired at"},
		{"another model's", otherPath, kekA, "the join token is another model's"},
		{"a key that does not open", writeToken(t, ctx, st, time.Now().Add(time.Hour)), wrong, "does not open the CA key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(st, root, "b", logs)
			b.joinToken, b.join = tc.token, give(tc.kek)
			if _, _, err := b.run(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("joining with a token %s = %v, want %q", tc.name, err, tc.want)
			}
		})
	}

	if _, ok, _ := pki.LoadKEK(filepath.Join(root, "b", "pki")); ok {
		t.Errorf("a refused join left a KEK in the data directory")
	}

	token := writeToken(t, ctx, st, time.Now().Add(time.Hour))
	b = setup(st, root, "b", logs)
	b.joinToken, b.join = token, give(kekA)
	joins = 0
	got, kekB, err := b.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if joins != 1 || kekB != kekA || !bytes.Equal(got.CertPEM(), ca.CertPEM()) {
		t.Fatalf("joined with a token: %d joins, same KEK %t, same CA %t; want 1, true, true", joins, kekB == kekA, bytes.Equal(got.CertPEM(), ca.CertPEM()))
	}
	if local, err := pki.LoadCA(b.dir); err != nil || !bytes.Equal(local.CertPEM(), ca.CertPEM()) {
		t.Errorf("the joined controller's data directory holds no copy of the model's CA: %v", err)
	}
	if _, err := openStored(t, ctx, st, b.dir); err != nil {
		t.Errorf("the joined controller's KEK does not open the stored key: %v", err)
	}
	// Restarted with the same flags: the token (used, or gone) is not read.
	if err := os.Remove(token); err != nil {
		t.Fatal(err)
	}
	b = setup(st, root, "b", logs)
	b.joinToken, b.join = token, give(wrong)
	if _, kek, err := b.run(ctx); err != nil || kek != kekA || joins != 1 {
		t.Errorf("restarted with its token file gone: %v, same KEK %t, %d joins; want nil, true, 1", err, kek == kekA, joins)
	}
}

// A model stored before keys were sealed holds its CA key in clear. The
// controllers that start on it seal it, several at once: exactly one
// seals it, with the KEK it keeps, and the others neither overwrite its
// sealed key nor keep a KEK that opens nothing. Each serves with the
// model's CA: an old one from its copy, a new one that read the key while
// it was in clear too; a new one that read it sealed is told to join.
func TestCASetupSealsAClearKey(t *testing.T) {
	st, ctx := newCAState(t)
	root := t.TempDir()
	model, err := pki.NewCA("the model", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clear, _ := model.KeyPEM()
	if _, err := st.SharedCA(ctx, model.CertPEM(), clear); err != nil {
		t.Fatal(err)
	}
	const n = 4
	logs := &syncbuf.Buffer{}
	setups := make([]*caSetup, n)
	keks := make([]pki.KEK, n)
	toJoin := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		setups[i] = setup(st, root, string(rune('a'+i)), logs)
		if i%2 == 1 { // the old model's controllers kept its CA; a and c are new
			if err := pki.SaveCA(setups[i].dir, model); err != nil {
				t.Fatal(err)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca, kek, err := setups[i].run(ctx)
			if i%2 == 0 && errors.Is(err, errNeedJoin) {
				toJoin[i] = true // it read the key after another sealed it
				return
			}
			if err != nil {
				t.Errorf("controller %d: %v", i, err)
				return
			}
			if !bytes.Equal(ca.CertPEM(), model.CertPEM()) {
				t.Errorf("controller %d serves with another CA", i)
			}
			keks[i] = kek
		}()
	}
	wg.Wait()
	stored, err := st.ModelCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !pki.IsSealedKey(stored.Key) {
		t.Fatalf("the stored key is still in clear")
	}
	holders := 0
	for i, s := range setups {
		if toJoin[i] {
			t.Logf("controller %d read the key sealed and was told to join", i)
			continue
		}
		if local, err := pki.LoadCA(s.dir); err != nil || !bytes.Equal(local.CertPEM(), model.CertPEM()) {
			t.Errorf("controller %d's data directory holds no copy of the model's CA: %v", i, err)
		}
		_, ok, err := pki.LoadKEK(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		holders++
		if _, err := openStored(t, ctx, st, s.dir); err != nil {
			t.Errorf("controller %d keeps a KEK that does not open the stored key: %v", i, err)
		}
		if keks[i].IsZero() {
			t.Errorf("controller %d keeps a KEK but does not hand it out", i)
		}
	}
	if holders == 0 {
		t.Fatalf("no controller keeps the KEK that seals the stored key:\n%s", logs)
	}
	t.Logf("%d of %d controllers hold the KEK", holders, n)
	if !strings.Contains(logs.String(), "sealed the model's CA key, stored in clear in etcd until now") {
		t.Errorf("no controller said it sealed the key:\n%s", logs)
	}
}

// When no controller holds the KEK any more, a controller whose data
// directory holds the model's CA still serves, saying it cannot admit
// controllers; --reseal-ca-key seals the key anew with a new KEK.
func TestCASetupWithoutKEKAnywhere(t *testing.T) {
	st, ctx := newCAState(t)
	root := t.TempDir()
	logs := &syncbuf.Buffer{}
	a := setup(st, root, "a", logs)
	ca, old, err := a.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.RemoveKEK(a.dir); err != nil {
		t.Fatal(err)
	}
	got, kek, err := setup(st, root, "a", logs).run(ctx)
	if err != nil || !bytes.Equal(got.CertPEM(), ca.CertPEM()) || !kek.IsZero() {
		t.Fatalf("restarted without its KEK: %v, same CA %t, a KEK %t; want nil, true, false", err, bytes.Equal(got.CertPEM(), ca.CertPEM()), !kek.IsZero())
	}
	if !strings.Contains(logs.String(), "cannot hand the key to controllers that join") {
		t.Errorf("the controller did not say it cannot admit controllers:\n%s", logs)
	}

	a = setup(st, root, "a", logs)
	a.reseal = true
	got, kek, err = a.run(ctx)
	if err != nil || kek.IsZero() || kek == old || !bytes.Equal(got.CertPEM(), ca.CertPEM()) {
		t.Fatalf("--reseal-ca-key: %v, a new KEK %t, same CA %t", err, !kek.IsZero() && kek != old, bytes.Equal(got.CertPEM(), ca.CertPEM()))
	}
	if _, err := openStored(t, ctx, st, a.dir); err != nil {
		t.Errorf("the key sealed anew does not open with the new KEK: %v", err)
	}
	// A controller without the model's CA cannot reseal.
	b := setup(st, root, "b", logs)
	b.reseal = true
	if _, _, err := b.run(ctx); err == nil {
		t.Errorf("--reseal-ca-key without the model's CA = nil error, want one")
	}
}

package provider_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/provisioner/provider"
)

func TestCheckLocalNetwork(t *testing.T) {
	for _, n := range []string{"127.1", "127.2", "127.254"} {
		if err := provider.CheckLocalNetwork(n); err != nil {
			t.Errorf("CheckLocalNetwork(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range []string{"", "127", "127.", "127.0", "127.255", "127.01", "127.+1", "127.1.2", "10.1", " 127.1"} {
		if err := provider.CheckLocalNetwork(n); err == nil {
			t.Errorf("CheckLocalNetwork(%q) = nil, want an error", n)
		}
	}
}

// TestClaimLocalNetwork: the machines' directory records its network
// when first claimed, and refuses another later, as it does a network
// other than the default once machines made before the record are there.
func TestClaimLocalNetwork(t *testing.T) {
	claim := func(dir, want string) (string, error) {
		t.Helper()
		return provider.ClaimLocalNetwork(dir, want)
	}
	mustClaim := func(dir, want, expect string) {
		t.Helper()
		got, err := claim(dir, want)
		if err != nil || got != expect {
			t.Fatalf("ClaimLocalNetwork(%s, %q) = %q, %v; want %q", dir, want, got, err, expect)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "network")); string(data) != expect+"\n" {
			t.Fatalf("the network file holds %q, want %q", data, expect+"\n")
		}
	}
	mustRefuse := func(dir, want, says string) {
		t.Helper()
		before, _ := os.ReadFile(filepath.Join(dir, "network"))
		got, err := claim(dir, want)
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Fatalf("ClaimLocalNetwork(%s, %q) = %q, %v; want an error saying %q", dir, want, got, err, says)
		}
		if after, _ := os.ReadFile(filepath.Join(dir, "network")); string(after) != string(before) {
			t.Fatalf("the refusal changed the network file from %q to %q", before, after)
		}
	}
	root := t.TempDir()

	fresh := filepath.Join(root, "fresh")
	mustClaim(fresh, "", provider.DefaultLocalNetwork)
	mustClaim(fresh, provider.DefaultLocalNetwork, provider.DefaultLocalNetwork)
	mustRefuse(fresh, "127.2", "have network 127.1")

	chosen := filepath.Join(root, "chosen")
	mustClaim(chosen, "127.7", "127.7")
	mustClaim(chosen, "", "127.7")
	mustRefuse(chosen, "127.8", "have network 127.7")
	mustRefuse(chosen, "127.300", "want 127.N")

	// Machines from before the record have the default network.
	old := filepath.Join(root, "old")
	if err := os.MkdirAll(filepath.Join(old, "3"), 0o700); err != nil {
		t.Fatal(err)
	}
	mustRefuse(old, "127.3", "were made with network 127.1")
	mustClaim(old, "", provider.DefaultLocalNetwork)

	// A machine's address, and the listing of instances, are in the
	// network's addresses; the record is no machine of its own.
	if err := os.MkdirAll(filepath.Join(chosen, "3"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chosen, "3", "agent.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &provider.Local{Dir: chosen, Network: "127.7"}
	insts, err := l.Instances(context.Background())
	if err != nil || len(insts) != 1 || insts[0].Address != "127.7.0.4" {
		t.Fatalf("Instances = %+v, %v; want machine 3 at 127.7.0.4 alone", insts, err)
	}
	if got := provider.LocalAddress("127.7", "750"); got != "127.7.3.1" {
		t.Errorf("LocalAddress(127.7, 750) = %s, want 127.7.3.1", got)
	}
	if got := provider.LocalAddress("", "7"); got != "127.1.0.8" {
		t.Errorf("LocalAddress(\"\", 7) = %s, want 127.1.0.8", got)
	}
}

package embedetcd_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
)

// TestQuietAtInfo starts, uses, restarts and stops a member with an
// operator's log level: nothing but hclog lines, and no warnings.
func TestQuietAtInfo(t *testing.T) {
	dir, err := os.MkdirTemp("", "ll-embed-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var out syncbuf.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "etcd", Level: hclog.Info, Output: &out})
	for round := 0; round < 2; round++ { // the second start finds existing data
		s, err := embedetcd.Start(embedetcd.Config{Dir: dir, Logger: logger, NoFsync: true})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.Client()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := 0; i < 20; i++ {
			if _, err := c.Put(ctx, "k", "v"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		c.Close()
		s.Close()
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if line == "" {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "{") || strings.Contains(line, "[WARN]") || strings.Contains(line, "[ERROR]") {
			t.Errorf("etcd logged at an operator's level: %s", line)
		}
	}
}

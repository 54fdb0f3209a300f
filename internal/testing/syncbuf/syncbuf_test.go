package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

// Writers and a reader at once: every write lands whole, and Has sees it.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d;", i, j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if !b.Has("w0-0;", "w7-99;") || b.Has("absent") {
		t.Errorf("Has: got %q", b.String())
	}
}

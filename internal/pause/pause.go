package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx ends: it reports whether d passed (false when
// ctx ended first, or had ended).
func For(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

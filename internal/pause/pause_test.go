package pause_test

import (
	"context"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/pause"
)

func TestFor(t *testing.T) {
	if !pause.For(context.Background(), time.Millisecond) {
		t.Errorf("For(background, 1ms) = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if pause.For(ctx, time.Hour) {
		t.Errorf("For(ended, 1h) = true, want false")
	}
}

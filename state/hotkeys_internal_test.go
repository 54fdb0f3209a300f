package state

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestKeyLocks(t *testing.T) {
	var k keyLocks
	ctx := context.Background()
	var mu sync.Mutex
	holders := map[string]int{}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			unlock, err := k.lock(ctx, key)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holders[key]++
			if holders[key] > 1 {
				t.Errorf("two holders of %s", key)
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			holders[key]--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if len(k.m) != 0 {
		t.Errorf("%d keys remembered after every lock was released", len(k.m))
	}

	unlock, _ := k.lock(ctx, "a")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := k.lock(short, "a"); err == nil {
		t.Error("a second lock of a held key succeeded")
	}
	unlock()
	if len(k.m) != 0 {
		t.Errorf("%d keys remembered after a waiter gave up", len(k.m))
	}
}

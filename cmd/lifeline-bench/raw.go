package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// rawCeiling measures put-if-absent transactions of a 100-byte value per
// second against etcd, from concurrency clients at once for d: what etcd
// alone allows on this machine.
func rawCeiling(ctx context.Context, c *clientv3.Client, concurrency int, d time.Duration) (float64, error) {
	value := strings.Repeat("x", 100)
	var n atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("/bench-raw/%d/%d", w, i)
				_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, value)).Commit()
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	// Leave nothing behind: not the keys, nor their deleted versions,
	// which stay until etcd compacts them (some 80,000 of them, in the
	// index that every read and write of the model looks its keys up in).
	del, err := c.Delete(context.Background(), "/bench-raw/", clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	if _, err := c.Compact(context.Background(), del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return 0, err
	}
	return float64(n.Load()) / elapsed.Seconds(), nil
}

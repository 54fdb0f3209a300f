package embedetcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A write whose caller gives up while the member handles it fails as a
// call over a socket would: with the context's error, never an Unknown
// one ("etcdserver: request cancelled", which etcd's gRPC layer does not
// map).
func TestInProcessWriteCancelledEndsWithTheContext(t *testing.T) {
	c := startMember(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var cancelled int
	var unknown []error
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(time.Duration(rand.IntN(400))*time.Microsecond, cancel)
				key := fmt.Sprintf("k/%d/%d", w, i)
				_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, "v")).Commit()
				cancel()
				if err == nil {
					continue
				}
				mu.Lock()
				switch {
				case errors.Is(err, context.Canceled):
					cancelled++
				case status.Code(err) == codes.Unknown:
					unknown = append(unknown, err)
				default:
					t.Errorf("txn: %v (%v), want context.Canceled", err, status.Code(err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(unknown) > 0 {
		t.Fatalf("%d writes cancelled ended Unknown, first %q (and %d with context.Canceled)", len(unknown), unknown[0], cancelled)
	}
	t.Logf("%d writes cancelled", cancelled)
}

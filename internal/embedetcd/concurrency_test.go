package embedetcd_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
)

// Thousands of requests at once through one client of the member, as a
// controller under load makes them, all complete. With grpc-go from
// v1.82.1 on, a connection over a unix socket with hundreds of unary calls
// in flight could stop for good, both sides' writers blocked on the
// socket and both readers throttled (grpc-go issue 9330): the client
// bounds the calls it has in flight.
func TestManyCallsAtOnceComplete(t *testing.T) {
	srv := startServer(t)
	// Through the socket, as a controller reaches an external cluster.
	c, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{srv.Endpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const callers, calls = 1024, 4
	// A stalled connection never completes; a loaded machine with the
	// race detector takes more than a minute for all of them.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	value := string(make([]byte, 1024))
	// A watch of everything written, as the controller's hub keeps.
	wch := c.Watch(ctx, "k/", clientv3.WithPrefix())
	go func() {
		for range wch {
		}
	}()
	var done atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := 0; j < calls; j++ {
				key := fmt.Sprintf("k/%d/%d", i, j)
				if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
					Then(clientv3.OpPut(key, value)).Else(clientv3.OpGet(key)).Commit(); err != nil {
					return
				}
				done.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := done.Load(); n != callers*calls {
		t.Fatalf("%d of %d transactions completed within five minutes", n, callers*calls)
	}
}

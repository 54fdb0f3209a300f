package dashboard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Streams asking for the same read while one is under way share it when
// it is recent enough for their change, and read alone when it is not.
func TestStatusReadsShared(t *testing.T) {
	var r statusReads
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	var reads atomic.Int32
	read := func(rev int64) func(context.Context) (*pb.StatusResponse, error) {
		return func(context.Context) (*pb.StatusResponse, error) {
			if reads.Add(1) == 1 {
				close(started)
				<-release
			}
			return &pb.StatusResponse{Status: &pb.ModelStatus{Revision: rev}}, nil
		}
	}
	var got [3]int64
	call := func(i int, need, rev int64) {
		resp, err := r.do(ctx, "", need, read(rev))
		if err != nil {
			t.Errorf("read %d: %v", i, err)
			return
		}
		got[i] = resp.GetStatus().GetRevision()
	}
	var wg sync.WaitGroup
	wg.Go(func() { call(0, 0, 10) })
	<-started
	wg.Go(func() { call(1, 5, 99) })  // joins: 10 is past 5
	wg.Go(func() { call(2, 20, 30) }) // joins, then reads alone: 10 is before 20
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		joined := r.flights[""].joined
		r.mu.Unlock()
		if joined == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("callers joined = %d, want 2", joined)
		}
	}
	close(release)
	wg.Wait()
	want := [3]int64{10, 10, 30}
	if got != want || reads.Load() != 2 {
		t.Errorf("answers = %v after %d reads, want %v after 2", got, reads.Load(), want)
	}
}

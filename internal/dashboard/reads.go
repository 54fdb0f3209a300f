package dashboard

import (
	"context"
	"sync"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// statusReads shares the model page streams' Status reads: the streams a
// change wakes ask for the same thing (the whole model, or the same
// units) at about the same time, and one read answers them all. Each
// stream still calls Status through CallAs as its user, authorized and
// audited as ever; only the read under the call is shared, and only when
// it is at or past the revision the stream needs (a read begun before
// the stream's change was committed may miss it: the stream then reads
// alone).
type statusReads struct {
	mu      sync.Mutex
	flights map[string]*statusRead
}

// statusRead is a read under way, and its answer once done is closed.
type statusRead struct {
	done   chan struct{}
	joined int // how many callers joined it besides its own
	resp   *pb.StatusResponse
	err    error
}

// do returns read's answer, or that of the same read (key) under way
// when it is at revision need or past. Other callers may hold the same
// answer: its holders must not change it.
func (r *statusReads) do(ctx context.Context, key string, need int64, read func(context.Context) (*pb.StatusResponse, error)) (*pb.StatusResponse, error) {
	r.mu.Lock()
	if f, ok := r.flights[key]; ok {
		f.joined++
		r.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err == nil && f.resp.GetStatus().GetRevision() >= need {
			return f.resp, nil
		}
		// Too old for this caller's change, or failed (its caller's
		// page closed, say): read alone.
		return read(ctx)
	}
	if r.flights == nil {
		r.flights = map[string]*statusRead{}
	}
	f := &statusRead{done: make(chan struct{})}
	r.flights[key] = f
	r.mu.Unlock()

	f.resp, f.err = read(ctx)
	r.mu.Lock()
	delete(r.flights, key)
	r.mu.Unlock()
	close(f.done)
	return f.resp, f.err
}

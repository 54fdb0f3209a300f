package watchhub

import (
	"fmt"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

func revEvents(rev int64, n int, valueBytes int) []state.Event {
	out := make([]state.Event, n)
	for i := range out {
		out[i] = state.Event{Type: state.EventPut, Key: fmt.Sprintf("k/%d/%d", rev, i), Value: make([]byte, valueBytes), ModRevision: rev}
	}
	return out
}

func ringRevisions(r *ring) []int64 {
	var out []int64
	for i := 0; i < r.n; i++ {
		if rev := r.at(i).ModRevision; len(out) == 0 || out[len(out)-1] != rev {
			out = append(out, rev)
		}
	}
	return out
}

func TestRingKeepsWholeRecentRevisions(t *testing.T) {
	r := newRing(5, 1<<20)
	r.reset(10)
	r.push(revEvents(11, 2, 0), time.Time{})
	r.push(revEvents(12, 2, 0), time.Time{})
	if got := ringRevisions(r); fmt.Sprint(got) != "[11 12]" || r.base != 10 {
		t.Fatalf("ring = %v after %d, want [11 12] after 10", got, r.base)
	}
	// Two more events do not fit: revision 11 goes whole.
	r.push(revEvents(13, 2, 0), time.Time{})
	if got := ringRevisions(r); fmt.Sprint(got) != "[12 13]" || r.base != 11 || r.n != 4 {
		t.Fatalf("ring = %v (%d events) after %d, want [12 13] (4) after 11", got, r.n, r.base)
	}
	if i := r.after(11); i != 0 {
		t.Errorf("after(11) = %d, want 0", i)
	}
	if i := r.after(12); r.at(i).ModRevision != 13 {
		t.Errorf("after(12) = event of revision %d, want 13", r.at(i).ModRevision)
	}
	if i := r.after(13); i != r.n {
		t.Errorf("after(13) = %d, want %d (none)", i, r.n)
	}
	// A revision bigger than the ring empties it.
	r.push(revEvents(14, 6, 0), time.Time{})
	if r.n != 0 || r.base != 14 || r.bytes != 0 {
		t.Fatalf("after a revision of 6 events: %d events, %d bytes, after %d; want none after 14", r.n, r.bytes, r.base)
	}
	r.push(revEvents(15, 1, 0), time.Time{})
	if got := ringRevisions(r); fmt.Sprint(got) != "[15]" || r.base != 14 {
		t.Fatalf("ring = %v after %d, want [15] after 14", got, r.base)
	}
}

func TestRingBoundsBytes(t *testing.T) {
	one := eventBytes(&revEvents(1, 1, 100)[0])
	r := newRing(100, 3*one+3) // keys grow by a byte from revision 10
	r.reset(0)
	for rev := int64(1); rev <= 10; rev++ {
		r.push(revEvents(rev, 1, 100), time.Time{})
		if r.bytes > 3*one+3 {
			t.Fatalf("ring holds %d bytes, want at most %d", r.bytes, 3*one+3)
		}
	}
	if got := ringRevisions(r); fmt.Sprint(got) != "[8 9 10]" || r.base != 7 {
		t.Fatalf("ring = %v after %d, want [8 9 10] after 7", got, r.base)
	}
	// Wrapping around the buffer many times keeps the order.
	r = newRing(3, 1<<20)
	r.reset(0)
	for rev := int64(1); rev <= 100; rev++ {
		r.push(revEvents(rev, 1+int(rev%2), 0), time.Time{})
	}
	for i := 1; i < r.n; i++ {
		if r.at(i).ModRevision < r.at(i-1).ModRevision {
			t.Fatalf("ring out of order: %v", ringRevisions(r))
		}
	}
	if got := ringRevisions(r); got[len(got)-1] != 100 || r.base != got[0]-1 {
		t.Errorf("ring = %v after %d, want it to end at 100 right after its base", got, r.base)
	}
}

func TestRingExpiresOldRevisions(t *testing.T) {
	r := newRing(100, 1<<20)
	r.reset(10)
	t0 := time.Unix(1000, 0)
	r.push(revEvents(11, 2, 10), t0)
	r.push(revEvents(12, 1, 10), t0.Add(time.Second))
	r.push(revEvents(13, 1, 10), t0.Add(2*time.Second))
	r.expire(t0.Add(1500 * time.Millisecond))
	if got := ringRevisions(r); fmt.Sprint(got) != "[13]" || r.base != 12 || r.n != 1 {
		t.Fatalf("ring = %v (%d events) after %d, want [13] (1) after 12", got, r.n, r.base)
	}
	r.expire(t0.Add(time.Hour))
	if r.n != 0 || r.bytes != 0 || r.base != 13 || r.pushed != nil {
		t.Fatalf("after everything expired: %d events, %d bytes, after %d, %d marks; want none after 13", r.n, r.bytes, r.base, len(r.pushed))
	}
	r.push(revEvents(14, 1, 10), t0.Add(time.Hour))
	if got := ringRevisions(r); fmt.Sprint(got) != "[14]" || r.base != 13 {
		t.Fatalf("ring = %v after %d, want [14] after 13", got, r.base)
	}
}

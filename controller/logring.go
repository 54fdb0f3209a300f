package controller

import (
	"sort"
	"sync"

	"github.com/lifelinehq/lifeline/internal/logship"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// LogRingLimits bound the log lines a controller keeps in memory for ctl
// debug-log: its own and those its machine agents ship. Each source (a
// machine, or the controller itself) may hold at most an eighth of them,
// so that one agent logging a flood cannot push the others' lines out.
type LogRingLimits struct {
	// Lines and Bytes bound the whole ring; DefaultLogRingLines and
	// DefaultLogRingBytes when zero.
	Lines int
	Bytes int
}

// The defaults of LogRingLimits: minutes of a busy model's lines.
const (
	DefaultLogRingLines = 50000
	DefaultLogRingBytes = 32 << 20
	// logSourceShare is the part of the ring one source may hold (1/8).
	logSourceShare = 8
)

func (l LogRingLimits) withDefaults() LogRingLimits {
	if l.Lines <= 0 {
		l.Lines = DefaultLogRingLines
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultLogRingBytes
	}
	return l
}

// logRing keeps the newest log lines, numbered in the order they arrived.
// Writers never wait on readers: a reader that falls behind finds its
// lines gone and is told how many it missed.
type logRing struct {
	lim                LogRingLimits
	srcLines, srcBytes int
	mu                 sync.Mutex
	all                []*ringEntry // oldest first, from head; dead ones are skipped
	head               int
	live, bytes        int
	seq                uint64 // the last line's number
	bySrc              map[string]*ringSource
	changed            chan struct{} // closed when lines arrive, then replaced
}

type ringEntry struct {
	seq  uint64
	src  *ringSource
	line *pb.LogLine
	size int
	dead bool
}

// ringSource is one source's lines in the ring, oldest first.
type ringSource struct {
	name         string
	q            []*ringEntry
	lines, bytes int
}

func newLogRing(lim LogRingLimits) *logRing {
	lim = lim.withDefaults()
	return &logRing{lim: lim, srcLines: max(1, lim.Lines/logSourceShare), srcBytes: max(1, lim.Bytes/logSourceShare),
		bySrc: map[string]*ringSource{}, changed: make(chan struct{})}
}

// add keeps src's lines, dropping src's oldest beyond its share and then
// the ring's oldest beyond its bounds.
func (r *logRing) add(src string, lines ...*pb.LogLine) {
	if len(lines) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.bySrc[src]
	if s == nil {
		s = &ringSource{name: src}
		r.bySrc[src] = s
	}
	for _, l := range lines {
		r.seq++
		e := &ringEntry{seq: r.seq, src: s, line: l, size: logship.Size(l)}
		s.q = append(s.q, e)
		s.lines++
		s.bytes += e.size
		r.all = append(r.all, e)
		r.live++
		r.bytes += e.size
		for s.lines > r.srcLines || s.bytes > r.srcBytes {
			r.kill(s.q[0])
		}
		for r.live > r.lim.Lines || r.bytes > r.lim.Bytes {
			for r.all[r.head].dead {
				r.pop()
			}
			r.kill(r.all[r.head])
		}
	}
	for r.head < len(r.all) && r.all[r.head].dead {
		r.pop()
	}
	r.compact()
	close(r.changed)
	r.changed = make(chan struct{})
}

// kill drops e, its source's oldest line, from the counts; it stays in
// all, dead, until it reaches the head or a compaction.
func (r *logRing) kill(e *ringEntry) {
	s := e.src
	s.q[0] = nil
	s.q = s.q[1:]
	s.lines--
	s.bytes -= e.size
	if s.lines == 0 {
		delete(r.bySrc, s.name)
	}
	e.dead = true
	r.live--
	r.bytes -= e.size
}

func (r *logRing) pop() {
	r.all[r.head] = nil
	r.head++
}

// compact drops the dead entries and the popped slots once they are as
// many as the live lines, so that all stays within twice the live lines.
func (r *logRing) compact() {
	if len(r.all) < 2*r.live+1024 {
		return
	}
	kept := make([]*ringEntry, 0, r.live)
	for _, e := range r.all[r.head:] {
		if !e.dead {
			kept = append(kept, e)
		}
	}
	r.all, r.head = kept, 0
}

// last returns the newest n lines keep accepts, oldest first, and the
// number of the newest line in the ring.
func (r *logRing) last(n int, keep func(*pb.LogLine) bool) ([]*pb.LogLine, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*pb.LogLine
	for i := len(r.all) - 1; i >= r.head && len(out) < n; i-- {
		if e := r.all[i]; !e.dead && keep(e.line) {
			out = append(out, e.line)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, r.seq
}

// since returns at most n lines keep accepts after line number after, up
// to line number until, oldest first; the number of the last line looked
// at; how many lines after after the ring dropped before they could be
// read; and a channel closed when more lines arrive.
func (r *logRing) since(after, until uint64, n int, keep func(*pb.LogLine) bool) (out []*pb.LogLine, next uint64, skipped int64, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := r.all[r.head:]
	first := r.seq + 1
	if len(live) > 0 {
		first = live[0].seq
	}
	if after+1 < first {
		skipped = int64(first - after - 1)
		after = first - 1
	}
	next = after
	i := sort.Search(len(live), func(i int) bool { return live[i].seq > after })
	for ; i < len(live) && len(out) < n && live[i].seq <= until; i++ {
		e := live[i]
		next = e.seq
		if !e.dead && keep(e.line) {
			out = append(out, e.line)
		}
	}
	return out, next, skipped, r.changed
}

// newest is the number of the newest line.
func (r *logRing) newest() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// counts returns the live lines and their bytes, and each source's lines.
func (r *logRing) counts() (int, int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	by := make(map[string]int, len(r.bySrc))
	for k, s := range r.bySrc {
		by[k] = s.lines
	}
	return r.live, r.bytes, by
}

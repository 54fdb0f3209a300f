package hooks

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// outputPipes carry a hook's stdout and stderr to their lineWriters. Run
// reads them itself rather than through os/exec's copying, which ends only
// when every copy of a pipe's write end is closed: in an agent's process
// running many units' hooks, a process forked meanwhile holds such a copy
// until it execs, which under load took long enough that hooks leaving
// nothing behind waited out outputWait (hundreds of times at 10,000
// units). Run now waits for the end of the output only as long as the
// hook's process group tells it to (drain).
type outputPipes struct {
	r, w    [2]*os.File
	readers sync.WaitGroup
	cut     [2]bool // the reader stopped at its deadline, not at the end
}

func newOutputPipes(stdout, stderr io.Writer) (*outputPipes, error) {
	p := &outputPipes{}
	for i := range p.r {
		r, w, err := os.Pipe()
		if err != nil {
			p.close()
			return nil, err
		}
		p.r[i], p.w[i] = r, w
	}
	for i, dst := range []io.Writer{stdout, stderr} {
		r := p.r[i]
		p.readers.Add(1)
		go func() {
			defer p.readers.Done()
			buf := readBuffers.Get().(*[]byte)
			defer readBuffers.Put(buf)
			// Through Read alone: io.Copy would hand the pipe to
			// os.File's WriteTo, which reads through a buffer of 32 KiB
			// made for each call, two a hook.
			_, err := io.CopyBuffer(dst, struct{ io.Reader }{r}, *buf)
			p.cut[i] = errors.Is(err, os.ErrDeadlineExceeded)
		}()
	}
	return p, nil
}

// readBuffers hold what a hook's output pipe gave at one read: its lines
// are copied out at once (lineWriter), and most hooks write little.
var readBuffers = sync.Pool{New: func() any {
	b := make([]byte, 4<<10)
	return &b
}}

// started closes the write ends the hook's process has its copies of.
func (p *outputPipes) started() {
	for i, w := range p.w {
		if w != nil {
			w.Close()
			p.w[i] = nil
		}
	}
}

// drain reads the rest of the output of the hook whose process group is
// pgid, the hook having exited: until the end of both streams, for at most
// drainWait when nothing of its group is left, or outputWait when some
// process it left behind may still write. It reports false when such a
// process still held the output when reading stopped.
func (p *outputPipes) drain(pgid int) bool {
	wait := drainWait
	if syscall.Kill(-pgid, 0) != syscall.ESRCH {
		wait = outputWait
	}
	deadline := time.Now().Add(wait)
	for _, r := range p.r {
		_ = r.SetReadDeadline(deadline)
	}
	p.readers.Wait()
	return wait == drainWait || !p.cut[0] && !p.cut[1]
}

// close closes every end still open, ending the readers.
func (p *outputPipes) close() {
	p.started()
	for i, r := range p.r {
		if r != nil {
			r.Close()
			p.r[i] = nil
		}
	}
	p.readers.Wait()
}

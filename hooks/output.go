package hooks

import (
	"bytes"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// maxLineBytes cuts a hook's output lines: a longer line is logged in
// pieces of this size.
const maxLineBytes = 16 << 10

// output collects a hook's stdout and stderr: each line goes to the
// logger as it completes, and the last lines of both streams are kept.
type output struct {
	logger hclog.Logger
	// onLine, when set, is handed each line too (Spec.Lines).
	onLine func(stream, text string)

	mu   sync.Mutex
	tail []string // a ring of the last cap(tail) lines
	next int      // where the next line goes once the ring is full
}

func newOutput(logger hclog.Logger, keep int) *output {
	return &output{logger: logger, tail: make([]string, 0, keep)}
}

// stream returns the writer for one of the hook's output streams. Each
// stream is written by one goroutine (os/exec's copier) at a time.
func (o *output) stream(name string) *lineWriter {
	return &lineWriter{out: o, name: name}
}

func (o *output) line(stream, text string) {
	o.logger.Info(text, "stream", stream)
	if o.onLine != nil {
		o.onLine(stream, text)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.tail) < cap(o.tail) {
		o.tail = append(o.tail, text)
		return
	}
	o.tail[o.next] = text
	o.next = (o.next + 1) % len(o.tail)
}

// lines returns the kept lines, oldest first.
func (o *output) lines() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append(append([]string(nil), o.tail[o.next:]...), o.tail[:o.next]...)
}

// lineWriter splits one stream into lines.
type lineWriter struct {
	out  *output
	name string
	buf  []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		switch {
		case i >= 0 && i <= maxLineBytes:
			w.emit(w.buf[:i])
			w.buf = w.buf[i+1:]
		case len(w.buf) >= maxLineBytes:
			w.emit(w.buf[:maxLineBytes])
			w.buf = w.buf[maxLineBytes:]
		default:
			// Keep the partial line, in a buffer of its own so that the
			// consumed prefix can be collected.
			w.buf = append([]byte(nil), w.buf...)
			return len(p), nil
		}
	}
}

// flush emits a last line that had no newline.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

func (w *lineWriter) emit(line []byte) {
	w.out.line(w.name, strings.TrimSuffix(string(line), "\r"))
}

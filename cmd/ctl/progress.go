package main

import (
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// progress shows how a long wait goes. On a terminal it redraws one line in
// place (\r); elsewhere (a log, a pipe) it prints a line at most every
// interval, so that logs stay readable.
type progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	last     time.Time
	shown    bool
}

// progressWidth keeps a redrawn line from wrapping, which would defeat \r.
const progressWidth = 79

func newProgress(w io.Writer, tty bool) *progress {
	return &progress{w: w, tty: tty, interval: 5 * time.Second}
}

// update shows line (on a terminal at once; elsewhere when the last line
// is older than the interval).
func (p *progress) update(line string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", truncate(line, progressWidth))
		p.shown = true
		return
	}
	now := time.Now()
	if !p.last.IsZero() && now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	fmt.Fprintln(p.w, line)
}

// now shows line at once, on a terminal or not: news the reader must not
// wait for (a unit that has just failed).
func (p *progress) now(line string) {
	p.last = time.Time{}
	p.update(line)
}

// done clears a redrawn line, so that what follows starts on a clean line.
func (p *progress) done() {
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// truncate shortens s to at most n runes, ending it with "..." when cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

// seconds formats an elapsed time for a progress line.
func seconds(d time.Duration) string {
	return d.Round(time.Second).String()
}

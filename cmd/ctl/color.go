package main

import (
	"strings"
	"unicode/utf8"
)

// The colours of the tabular status's state cells. Every code is five
// bytes, so that each cell of a painted column, coloured or not, carries
// the same invisible width and tabwriter still aligns the columns.
const (
	colorRed     = "\x1b[31m"
	colorGreen   = "\x1b[32m"
	colorYellow  = "\x1b[33m"
	colorDefault = "\x1b[39m"
	colorReset   = "\x1b[0m"
)

// useColor says whether ctl colours its tabular status: only on a
// terminal, and neither with --no-color nor with NO_COLOR set to
// anything but "" (no-color.org).
func useColor(noColorFlag bool, noColorEnv string, stdoutTTY bool) bool {
	return stdoutTTY && !noColorFlag && noColorEnv == ""
}

// stateColor is the colour of a status: red for what is broken, yellow
// for what waits on someone, green for what is well.
func stateColor(s string) string {
	switch s {
	case "error", "lost", "down", "failed", "unauthenticated":
		return colorRed
	case "blocked", "waiting":
		return colorYellow
	case "active", "idle", "started":
		return colorGreen
	}
	return colorDefault
}

// painter colours the cells of a status's state columns, or leaves them
// as they are.
type painter bool

// state paints a state cell in its colour.
func (p painter) state(s string) string {
	if !p {
		return s
	}
	return stateColor(s) + s + colorReset
}

// plain paints a cell of a painted column that is no state (its header)
// in the default colour: the same invisible width as the states'.
func (p painter) plain(s string) string {
	if !p {
		return s
	}
	return colorDefault + s + colorReset
}

// cutLine cuts a line to width visible characters, escape sequences
// counting for none, ending it with … when cut (and resetting the colour
// when it holds any).
func cutLine(line string, width int) string {
	if width <= 0 || visibleLen(line) <= width {
		return line
	}
	visible := 0
	for i := 0; i < len(line); {
		if n := escapeLen(line[i:]); n > 0 {
			i += n
			continue
		}
		if visible == width-1 {
			out := line[:i] + "…"
			if strings.Contains(out, "\x1b[") {
				out += colorReset
			}
			return out
		}
		_, size := utf8.DecodeRuneInString(line[i:])
		visible++
		i += size
	}
	return line
}

// visibleLen is how many characters of s show: escape sequences show
// none.
func visibleLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		if e := escapeLen(s[i:]); e > 0 {
			i += e
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		n++
		i += size
	}
	return n
}

// escapeLen is the length of the colour escape sequence s starts with,
// or 0.
func escapeLen(s string) int {
	if !strings.HasPrefix(s, "\x1b[") {
		return 0
	}
	if end := strings.IndexByte(s, 'm'); end >= 0 {
		return end + 1
	}
	return 0
}

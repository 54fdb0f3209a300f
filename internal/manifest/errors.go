package manifest

import (
	"fmt"
	"slices"
	"strings"
)

// Errors is every problem found in a manifest, each one line naming its
// place: "resources.web.config.units: want integer, got string". Parse and
// Validate list them all rather than stopping at the first.
type Errors struct {
	List []string
}

func (e *Errors) Error() string {
	if len(e.List) == 1 {
		return e.List[0]
	}
	return fmt.Sprintf("%d problems: %s", len(e.List), strings.Join(e.List, "; "))
}

// add appends one problem.
func (e *Errors) add(format string, args ...any) {
	e.List = append(e.List, oneLine(fmt.Sprintf(format, args...)))
}

// err returns e when it holds problems, sorted and each once, else nil.
func (e *Errors) err() error {
	if len(e.List) == 0 {
		return nil
	}
	e.List = slices.Compact(e.List)
	return e
}

// oneLine joins the lines of a message, so that every problem is one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// Command ctl is the operator's client of a Lifeline controller.
//
// The commands arrive with the controller issue; until then ctl only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "ctl: no commands yet: the controller API is not built")
	os.Exit(2)
}

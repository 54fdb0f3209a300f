// Command lifelined is Lifeline's daemon: the controller, the machine agent
// and, through symlinks, the hook tools.
//
// The subcommands arrive with the controller issue; until then it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "lifelined: no subcommands yet: the controller is not built")
	os.Exit(2)
}

// Command reaper ends a test sandbox's processes when the test binary that
// made the sandbox dies without its cleanup: a timeout's panic, a SIGKILL.
// The sandbox's controllers and machine agents run in sessions of their
// own, so nothing else would stop them, and they would run for hours.
//
// e2etest starts one reaper per sandbox, with the sandbox's directory in
// $LIFELINE_REAP_DIR (not in its arguments, so that the reaper is not
// itself a process "mentioning the sandbox") and the test binary's pid in
// $LIFELINE_REAP_PARENT. It checks twice a second whether its parent is
// still that process; once it is not, it kills every process whose command
// line or working directory is in the sandbox, until none is left, and
// exits. The sandbox's cleanup kills the reaper itself when the test ends
// normally.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

func main() {
	dir := os.Getenv("LIFELINE_REAP_DIR")
	parent, err := strconv.Atoi(os.Getenv("LIFELINE_REAP_PARENT"))
	if dir == "" || err != nil {
		fmt.Fprintln(os.Stderr, "reaper: LIFELINE_REAP_DIR and LIFELINE_REAP_PARENT must be set")
		os.Exit(2)
	}
	for os.Getppid() == parent {
		time.Sleep(500 * time.Millisecond)
	}
	// Kill until a whole second passes with nothing left: a machine agent
	// may start a unit's process between two listings.
	quiet := 0
	for deadline := time.Now().Add(time.Minute); quiet < 5 && time.Now().Before(deadline); {
		left := e2etest.SandboxProcs(dir)
		if len(left) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		for _, p := range left {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

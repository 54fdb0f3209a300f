// Package version owns what a Lifeline binary says it is: its version,
// the commit it was built from and when, as the build stamps them with
// -ldflags -X (Makefile's LDFLAGS), or, unstamped, "devel" and what the Go
// toolchain recorded of the source's version control. It depends on
// nothing but the standard library.
package version

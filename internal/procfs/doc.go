// Package procfs reads Linux's process table (/proc) for what more than
// one package asks of it: the live processes of a POSIX session
// (SessionPIDs), which the local provider stops a machine's agents by and
// the end-to-end sandbox checks are gone. It owns no process and writes
// nothing. Where there is no /proc, it finds none.
package procfs

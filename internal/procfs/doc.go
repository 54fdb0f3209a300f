// Package procfs reads Linux's process table (/proc) for what more than
// one package asks of it: the processes there (PIDs), what a process's
// stat file says of its state, group, session and start (ReadStat,
// ParseStat), and the live processes of a POSIX session (SessionPIDs),
// which the local provider stops a machine's agents by and the
// end-to-end sandbox checks are gone. The hook runner, the host-claims
// supervisor and the tests' process listings read it too. It owns no
// process and writes nothing. Where there is no /proc, it finds none.
package procfs

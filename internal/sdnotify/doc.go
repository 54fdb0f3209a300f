// Package sdnotify tells systemd how a service started with Type=notify
// stands (sd_notify(3)): READY=1 once it serves, STOPPING=1 as it stops.
// It writes one datagram to the socket $NOTIFY_SOCKET names (a path, or
// an abstract socket when it starts with "@"), and does nothing when the
// variable is unset: the daemons run the same under systemd and not.
//
// It owns only that notification; it depends on nothing but the standard library.
package sdnotify

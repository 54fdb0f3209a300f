package sdnotify

import (
	"net"
	"os"
	"time"
)

const (
	// Ready says the service serves: systemd ends the start job.
	Ready = "READY=1"
	// Stopping says the service is stopping.
	Stopping = "STOPPING=1"
)

// Notify sends state to systemd, and reports whether there was a
// socket to send it to.
func Notify(state string) (bool, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return false, nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return true, err
	}
	defer conn.Close()
	// A datagram socket's write does not wait for a reader, but a full
	// queue at the receiver would block it: systemd reads at once.
	if err := conn.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return true, err
	}
	_, err = conn.Write([]byte(state))
	return true, err
}

package sdnotify_test

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/sdnotify"
)

// TestNotify: with $NOTIFY_SOCKET unset nothing is sent; set to a path or
// an abstract name, the state arrives there as one datagram.
func TestNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := sdnotify.Notify(sdnotify.Ready); sent || err != nil {
		t.Errorf("Notify without a socket = %v, %v; want false, nil", sent, err)
	}
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@lifeline-sdnotify-test-" + t.Name()} {
		listen := name
		if name[0] == '@' {
			listen = "\x00" + name[1:]
		}
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: listen, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		t.Setenv("NOTIFY_SOCKET", name)
		if sent, err := sdnotify.Notify(sdnotify.Ready); !sent || err != nil {
			t.Fatalf("Notify to %q = %v, %v; want true, nil", name, sent, err)
		}
		buf := make([]byte, 64)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil || string(buf[:n]) != "READY=1" {
			t.Errorf("the socket %q got %q, %v; want READY=1", name, buf[:n], err)
		}
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody"))
	if sent, err := sdnotify.Notify(sdnotify.Ready); !sent || err == nil {
		t.Errorf("Notify to a socket nobody listens on = %v, %v; want true and an error", sent, err)
	}
}

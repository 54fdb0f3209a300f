package etcdtest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// CutProxy forwards TCP connections to an etcd member's unix socket until
// cut: then it closes what it carries and every connection it accepts,
// as a partition from etcd would, until restored. The test's cleanup cuts
// it for good and waits for the goroutines carrying its connections.
type CutProxy struct {
	lis    net.Listener
	target string
	conns  sync.WaitGroup

	mu      sync.Mutex
	cut     bool
	carried map[net.Conn]struct{}
}

// NewCutProxy returns a proxy to the member at endpoint ("unix://PATH",
// as embedetcd.Server.Endpoint gives), carrying connections until the
// test ends.
func NewCutProxy(t testing.TB, endpoint string) *CutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{lis: lis, target: strings.TrimPrefix(endpoint, "unix://"), carried: map[net.Conn]struct{}{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.conns.Go(func() { p.serve(c) })
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		p.Cut(true)
		p.conns.Wait()
	})
	return p
}

// Endpoint is the proxy's, for an etcd client: "http://127.0.0.1:PORT".
func (p *CutProxy) Endpoint() string { return "http://" + p.lis.Addr().String() }

// Cut closes every connection the proxy carries and refuses new ones
// (cut), or carries them again.
func (p *CutProxy) Cut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.carried {
			c.Close()
		}
		clear(p.carried)
	}
}

// track adds c to the connections carried, or says the proxy is cut.
func (p *CutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.carried[c] = struct{}{}
	return true
}

func (p *CutProxy) serve(c net.Conn) {
	up, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c) || !p.track(up) {
		c.Close()
		up.Close()
		return
	}
	p.conns.Go(func() { io.Copy(up, c); up.Close() })
	io.Copy(c, up)
	c.Close()
}

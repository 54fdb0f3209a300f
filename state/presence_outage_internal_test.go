package state

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
)

// A presence whose key cannot be deleted as it closes (etcd out of reach)
// tries again until it can: the lease, kept alive by the other presences,
// would otherwise keep the key, and the agent present, for as long as any
// of them is.
func TestPresenceCloseOutlastsAnOutage(t *testing.T) {
	ctx := etcdtest.Context(t)
	ns := etcdtest.Namespace(t)
	px := newCutProxy(t, strings.TrimPrefix(etcdtest.Server(t).Endpoint(), "unix://"))
	c, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{px.addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := New(c, Config{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	st.presenceDeleteTimeout = 100 * time.Millisecond
	gone, err := st.Present(ctx, "machine-0", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stays, err := st.Present(ctx, "machine-1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stays.Close()

	px.cut(true)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		gone.Close()
	}()
	// The outage lasts several tries.
	time.Sleep(time.Second)
	select {
	case <-closed:
		t.Fatal("Close returned while etcd was out of reach, its key left behind")
	default:
	}
	px.cut(false)
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return once etcd was back")
	}
	direct := etcdtest.Client(t)
	for tag, want := range map[string]int{"machine-0": 0, "machine-1": 1} {
		r, err := direct.Get(ctx, ns+presenceKey(tag))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != want {
			t.Errorf("%s's presence keys = %d after the outage, want %d", tag, len(r.Kvs), want)
		}
	}
}

// cutProxy forwards TCP connections to a unix socket until cut, which
// closes them and refuses new ones until it is undone.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.cut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("unix", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		for _, pair := range [][2]net.Conn{{in, out}, {out, in}} {
			p.wg.Go(func() {
				io.Copy(pair[0], pair[1]) // ends when either side closes, or a cut
				pair[0].Close()
				pair[1].Close()
			})
		}
	}
}

// cut closes every connection and refuses new ones (down), or lets them
// through again.
func (p *cutProxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

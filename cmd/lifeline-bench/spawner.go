package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"github.com/lifelinehq/lifeline/hooks"
)

// The fleet's process holds a TCP connection for each of its thousand
// machines, and every hook's fork copies that descriptor table and every
// exec closes it again: 0.2 ms of CPU a hook more for each thousand
// connected sockets (docs/PERFORMANCE.md, fourteenth round), which a
// machine agent holding a few descriptors on a host of its own does not
// pay. So the harness starts the hooks from a small process of its own,
// the spawner (this program run with -hook-spawner-process): the agents' code
// runs them through hooks.Spec.Starter, which sends each hook's path,
// directory and environment, with its output pipes' write ends, over a
// unix socket; the spawner starts it with os/exec (hooks.ExecStarter),
// says its pid, and later how it exited. The hooks are the spawner's
// children: their CPU is its children's (procCPU).

// spawnRequest asks the spawner to start a hook; its stdout and stderr
// come with it (SCM_RIGHTS).
type spawnRequest struct {
	ID   uint64   `json:"id"`
	Path string   `json:"path"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
}

// spawnReply says a hook started (Pid), or could not (Errno, or Error),
// and then, in a second reply, that it exited (Exited, Status).
type spawnReply struct {
	ID     uint64 `json:"id"`
	Pid    int    `json:"pid,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	Error  string `json:"error,omitempty"`
	Exited bool   `json:"exited,omitempty"`
	Status int    `json:"status,omitempty"`
}

// maxSpawnMessage bounds a request: a hook's environment is a dozen
// variables.
const maxSpawnMessage = 64 << 10

// hookSpawner is the fleet's end of the spawner: a hooks.Starter.
type hookSpawner struct {
	cmd  *exec.Cmd
	conn *net.UnixConn

	wmu sync.Mutex // one message at a time

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan spawnReply
	err     error // why the spawner went, once it has
}

// startHookSpawner starts this program as the spawner, its stderr to
// logf.
func startHookSpawner(logf *os.File) (*hookSpawner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hook spawner: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("hook spawner: %w", err)
	}
	s := &hookSpawner{conn: c.(*net.UnixConn), waiting: map[uint64]chan spawnReply{}}
	s.cmd = exec.Command(self, "-hook-spawner-process")
	s.cmd.ExtraFiles = []*os.File{theirs} // its descriptor 3
	s.cmd.Stderr = logf
	// Its own process group, away from the terminal's signals: it ends
	// when its socket does.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.conn.Close()
		return nil, fmt.Errorf("hook spawner: %w", err)
	}
	go s.read()
	return s, nil
}

// Start implements hooks.Starter.
func (s *hookSpawner) Start(path, dir string, env []string, stdout, stderr *os.File) (hooks.Process, error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, s.err
	}
	s.next++
	id := s.next
	replies := make(chan spawnReply, 2)
	s.waiting[id] = replies
	s.mu.Unlock()

	msg, err := json.Marshal(spawnRequest{ID: id, Path: path, Dir: dir, Env: env})
	if err == nil {
		err = s.send(msg, stdout, stderr)
	}
	if err != nil {
		s.forget(id)
		return nil, fmt.Errorf("hook spawner: %w", err)
	}
	r := <-replies
	switch {
	case r.Errno != 0:
		s.forget(id)
		return nil, &os.PathError{Op: "fork/exec", Path: path, Err: syscall.Errno(r.Errno)}
	case r.Error != "":
		s.forget(id)
		return nil, errors.New(r.Error)
	}
	return &spawned{s: s, id: id, pid: r.Pid, replies: replies}, nil
}

// send sends msg with the two files' descriptors.
func (s *hookSpawner) send(msg []byte, stdout, stderr *os.File) error {
	var fds []int
	for _, f := range []*os.File{stdout, stderr} {
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return err
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _, err := s.conn.WriteMsgUnix(msg, syscall.UnixRights(fds...), nil)
	return err
}

func (s *hookSpawner) forget(id uint64) {
	s.mu.Lock()
	delete(s.waiting, id)
	s.mu.Unlock()
}

// read hands each reply to the hook it is about until the spawner goes;
// then every hook still waiting hears that it did.
func (s *hookSpawner) read() {
	buf := make([]byte, maxSpawnMessage)
	var err error
	for {
		var n int
		n, err = s.conn.Read(buf)
		if err != nil {
			break
		}
		var r spawnReply
		if err = json.Unmarshal(buf[:n], &r); err != nil {
			break
		}
		s.mu.Lock()
		replies := s.waiting[r.ID]
		s.mu.Unlock()
		if replies != nil {
			replies <- r
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = errors.New("exited")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = fmt.Errorf("hook spawner: %w", err)
	for id, replies := range s.waiting {
		select {
		case replies <- spawnReply{ID: id, Error: s.err.Error()}:
		default:
		}
		delete(s.waiting, id)
	}
}

// pid is the spawner's process id, for its CPU and its hooks'.
func (s *hookSpawner) pid() int { return s.cmd.Process.Pid }

// stop ends the spawner (hooks still running are left to finish) and
// waits for it.
func (s *hookSpawner) stop() error {
	s.conn.Close()
	return s.cmd.Wait()
}

// spawned is a hook's process the spawner started.
type spawned struct {
	s       *hookSpawner
	id      uint64
	pid     int
	replies chan spawnReply
}

func (p *spawned) Pid() int { return p.pid }

func (p *spawned) Wait() (syscall.WaitStatus, error) {
	r := <-p.replies
	p.s.forget(p.id)
	if !r.Exited {
		return 0, errors.New(r.Error)
	}
	return syscall.WaitStatus(r.Status), nil
}

// runHookSpawner is the spawner (-hook-spawner-process): it starts the hooks the
// fleet asks for on its descriptor 3 until the fleet closes its end.
func runHookSpawner() error {
	f := os.NewFile(3, "spawner")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return err
	}
	conn, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("descriptor 3 is a %T, not a unix socket", c)
	}
	defer conn.Close()
	var wmu sync.Mutex
	reply := func(r spawnReply) {
		msg, _ := json.Marshal(r)
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = conn.Write(msg)
	}
	buf, oob := make([]byte, maxSpawnMessage), make([]byte, syscall.CmsgSpace(2*4))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return nil // the fleet is gone
		}
		files, err := receivedFiles(oob[:oobn])
		if err != nil {
			return err
		}
		var req spawnRequest
		if err := json.Unmarshal(buf[:n], &req); err != nil || len(files) != 2 {
			for _, f := range files {
				f.Close()
			}
			return fmt.Errorf("bad request (%d descriptors): %v", len(files), err)
		}
		p, err := hooks.ExecStarter{}.Start(req.Path, req.Dir, req.Env, files[0], files[1])
		files[0].Close()
		files[1].Close()
		if err != nil {
			r := spawnReply{ID: req.ID, Error: err.Error()}
			var errno syscall.Errno
			if errors.As(err, &errno) {
				r.Errno = int(errno)
			}
			reply(r)
			continue
		}
		reply(spawnReply{ID: req.ID, Pid: p.Pid()})
		go func() {
			ws, err := p.Wait()
			if err != nil {
				reply(spawnReply{ID: req.ID, Error: err.Error()})
				return
			}
			reply(spawnReply{ID: req.ID, Exited: true, Status: int(ws)})
		}()
	}
}

// receivedFiles returns the descriptors a message carried.
func receivedFiles(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return nil, err
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "hook output"))
		}
	}
	return files, nil
}

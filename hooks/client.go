package hooks

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The protocol between a hook tool and the unit agent's Server, over the
// unix socket: one connection per tool call, carrying one request and one
// response, each a JSON object on one line (newline-terminated).
const (
	// protocolVersion is the request's "version". A server refuses any
	// other version, which happens only when the lifelined binary was
	// replaced under a running agent.
	protocolVersion = 1
	// MaxRequestBytes bounds a request line: relation-set of larger
	// settings is refused.
	MaxRequestBytes = 2 << 20
	// maxResponseBytes bounds a response line.
	maxResponseBytes = 16 << 20
	// dialTimeout bounds a tool's connecting to the agent.
	dialTimeout = 10 * time.Second
)

// request is what a hook tool sends.
type request struct {
	Version int `json:"version"`
	// ContextID is the caller's context id, read from the file
	// LIFELINE_CONTEXT_FILE names.
	ContextID string `json:"context_id"`
	// Tool is the tool's name ("relation-get"), Args its arguments without
	// argv[0].
	Tool string   `json:"tool"`
	Args []string `json:"args"`
	// Env holds the caller's LIFELINE_RELATION_ID and LIFELINE_REMOTE_UNIT,
	// those that are set: the defaults of -r and of relation-get's UNIT.
	Env map[string]string `json:"env,omitempty"`
	// Input is what relation-set --file read, the file named or standard
	// input for "-", which the tool sends as "--file -": the agent reads
	// no file of the hook's.
	Input string `json:"input,omitempty"`
}

// response is what the server answers: what the tool prints and its exit
// status.
type response struct {
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	Code   int    `json:"code"`
}

// IsTool reports whether name is the name of a hook tool: lifelined,
// invoked through a symlink of that name, runs RunTool.
func IsTool(name string) bool {
	_, ok := tools()[name]
	return ok
}

// ToolNames returns the hook tools' names, sorted.
func ToolNames() []string {
	var names []string
	for name := range tools() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// RunTool is a hook tool's main: args is its argv (argv[0] names the
// tool), getenv reads its environment (os.Getenv). It sends the call to the
// unit agent over LIFELINE_AGENT_SOCKET with the context id read from the
// file LIFELINE_CONTEXT_FILE names, copies what the agent answers to stdout
// and stderr, and returns the exit code. The agent parses the arguments;
// RunTool only carries them.
func RunTool(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	tool := "hook-tool"
	if len(args) > 0 {
		tool = filepath.Base(args[0])
		args = args[1:]
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", tool, fmt.Sprintf(format, a...))
		return 1
	}
	socket, file := getenv(EnvAgentSocket), getenv(EnvContextFile)
	switch {
	case socket == "":
		return fail("not running inside a hook: %s is not set", EnvAgentSocket)
	case file == "":
		return fail("not running inside a hook: %s is not set", EnvContextFile)
	}
	id, err := readContextID(file)
	if errors.Is(err, fs.ErrNotExist) {
		// Removed when its hook ended.
		return fail("%s", errExpired)
	}
	if err != nil {
		return fail("%v", err)
	}
	for i, a := range args {
		if !utf8.ValidString(a) {
			return fail("argument %d is not valid UTF-8", i+1)
		}
	}
	req := request{Version: protocolVersion, ContextID: id, Tool: tool, Args: args, Env: map[string]string{}}
	if req.Args == nil {
		req.Args = []string{}
	}
	for _, k := range []string{EnvRelationID, EnvRemoteUnit, EnvRemoteService} {
		if v := getenv(k); v != "" {
			req.Env[k] = v
		}
	}
	if tool == "relation-set" {
		if req.Args, req.Input, err = readFileArg(req.Args, stdin); err != nil {
			return fail("%v", err)
		}
	}
	line, err := json.Marshal(req)
	if err != nil {
		return fail("encode the request: %v", err)
	}
	if len(line) >= MaxRequestBytes {
		return fail("request of %d bytes is too large: at most %d", len(line), MaxRequestBytes)
	}
	resp, err := send(socket, append(line, '\n'))
	if err != nil {
		return fail("%v", err)
	}
	io.WriteString(stdout, resp.Stdout)
	io.WriteString(stderr, resp.Stderr)
	return resp.Code
}

// readFileArg finds relation-set's --file FILE (or --file=FILE) in args,
// reads FILE (standard input for "-"), at most MaxRequestBytes, and
// returns args with "--file -" in its place, and what it read.
func readFileArg(args []string, stdin io.Reader) ([]string, string, error) {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		path, ok := strings.CutPrefix(a, "--file=")
		if a == "--file" {
			if i+1 == len(out) {
				return args, "", nil // the agent reports the missing value
			}
			path, ok = out[i+1], true
			out = slices.Delete(out, i+1, i+2)
		}
		if !ok {
			continue
		}
		out[i] = "--file=-"
		var r io.Reader = stdin
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				return nil, "", fmt.Errorf("--file: %w", err)
			}
			defer f.Close()
			r = f
		}
		if r == nil {
			return nil, "", errors.New("--file -: no standard input")
		}
		b, err := io.ReadAll(io.LimitReader(r, MaxRequestBytes))
		if err != nil {
			return nil, "", fmt.Errorf("--file: %w", err)
		}
		if !utf8.Valid(b) {
			return nil, "", errors.New("--file: not valid UTF-8")
		}
		return out, string(b), nil
	}
	return args, "", nil
}

// readContextID reads a hook's context id from its context file.
func readContextID(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%s %q is not an absolute path", EnvContextFile, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read the hook's context: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxContextFile))
	if err != nil {
		return "", fmt.Errorf("read the hook's context: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("the hook's context file %s is empty", path)
	}
	return id, nil
}

// send sends one request line to the agent at socket and reads its
// response.
func send(socket string, line []byte) (response, error) {
	conn, err := net.DialTimeout("unix", socket, dialTimeout)
	if err != nil {
		return response{}, fmt.Errorf("cannot reach the unit agent at %s: %w", socket, unwrapOp(err))
	}
	defer conn.Close()
	// A write error is reported only when no response explains it: a
	// server that refuses a request may close before reading all of it.
	_, werr := conn.Write(line)
	var resp response
	rd := bufio.NewReader(io.LimitReader(conn, maxResponseBytes))
	b, rerr := rd.ReadBytes('\n')
	if rerr == nil {
		if err := json.Unmarshal(b, &resp); err != nil {
			return response{}, fmt.Errorf("bad response from the unit agent: %w", err)
		}
		return resp, nil
	}
	if werr != nil {
		return response{}, fmt.Errorf("send to the unit agent: %w", unwrapOp(werr))
	}
	if errors.Is(rerr, io.EOF) {
		return response{}, errors.New("the unit agent closed the connection without answering")
	}
	return response{}, fmt.Errorf("read the unit agent's answer: %w", unwrapOp(rerr))
}

// unwrapOp drops net.OpError's "dial unix /path:" prefix, which the
// callers' messages already say.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err
		}
		return op.Err
	}
	return err
}

// InstallTools makes dir (creating it if needed) hold one symlink per hook
// tool, each pointing at lifelined, the absolute path of the lifelined
// binary. It is idempotent: a correct link is left alone, a wrong link or
// file of a tool's name is replaced (atomically), a directory of a tool's
// name is an error.
func InstallTools(dir, lifelined string) error {
	if !filepath.IsAbs(lifelined) {
		return fmt.Errorf("install hook tools: lifelined path %q is not absolute", lifelined)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install hook tools: %w", err)
	}
	for _, name := range ToolNames() {
		path := filepath.Join(dir, name)
		if target, err := os.Readlink(path); err == nil && target == lifelined {
			continue
		}
		if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
			return fmt.Errorf("install hook tool %s: %s is a directory", name, path)
		}
		tmp := path + ".tmp"
		_ = os.Remove(tmp)
		if err := os.Symlink(lifelined, tmp); err != nil {
			return fmt.Errorf("install hook tool %s: %w", name, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("install hook tool %s: %w", name, err)
		}
	}
	return nil
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The controller record is a small JSON file next to the client config
// (client.json → client.controller.json) that ctl bootstrap writes, so that
// ctl kill-controller, given only the client config's location, finds the
// data directory of the controller it started:
//
//	{"data_dir": "/home/me/.local/share/lifeline/controller",
//	 "api_addr": "127.0.0.1:17070", "provider": "manual",
//	 "lifelined": "/usr/local/bin/lifelined"}
//
// The controller's pid is not in it: the controller keeps its own in
// data_dir/controller.pid while it runs.
type controllerRecord struct {
	DataDir   string `json:"data_dir"`
	APIAddr   string `json:"api_addr"`
	Provider  string `json:"provider"`
	Lifelined string `json:"lifelined"`
}

// pidFile and logFile live in the controller's data directory.
const (
	pidFile = "controller.pid"
	logFile = "controller.log"
)

// recordPath is where the controller record of the client config at
// configPath lives.
func recordPath(configPath string) string {
	return strings.TrimSuffix(configPath, ".json") + ".controller.json"
}

func readRecord(path string) (controllerRecord, error) {
	var rec controllerRecord
	data, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("controller record %s: %w", path, err)
	}
	if !filepath.IsAbs(rec.DataDir) {
		return rec, fmt.Errorf("controller record %s: data_dir %q is not an absolute path", path, rec.DataDir)
	}
	return rec, nil
}

func writeRecord(path string, rec controllerRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("controller record: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("controller record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("controller record: %w", err)
	}
	return nil
}

// findLifelined finds the daemon: next to ctl's own executable, else on
// $PATH.
func findLifelined() (string, error) {
	if exe, err := os.Executable(); err == nil {
		if exe, err := filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), "lifelined")
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	p, err := exec.LookPath("lifelined")
	if err != nil {
		return "", errors.New("cannot find lifelined next to ctl or on $PATH: install it beside ctl")
	}
	return filepath.Abs(p)
}

// readPID reads a controller's pid file.
func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("pid file %s holds %q, not a process id", path, bytes.TrimSpace(data))
	}
	return pid, nil
}

// processAlive says whether pid is a process that has not exited. A zombie
// (exited, not yet reaped: the controller is detached, and its new parent
// may be slow to reap) counts as exited.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		// No /proc: signal 0 said it exists.
		return !errors.Is(err, fs.ErrNotExist) || !procMounted()
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces or parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

func procMounted() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// isController says whether pid is a running `lifelined controller` with
// data directory dataDir, so that a stale pid file, whose number another
// process may have taken since, never gets that process signalled. Without
// /proc it trusts the pid file.
func isController(pid int, dataDir string) bool {
	if !processAlive(pid) {
		return false
	}
	if !procMounted() {
		return true
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if len(argv) < 2 || filepath.Base(argv[0]) != "lifelined" || argv[1] != "controller" {
		return false
	}
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok && sameDir(v, dataDir) {
			return true
		}
		if a == "--data-dir" && i+1 < len(argv) && sameDir(argv[i+1], dataDir) {
			return true
		}
	}
	return false
}

func sameDir(a, b string) bool {
	return filepath.Clean(a) == filepath.Clean(b)
}

// runningController returns the pid of the controller running with
// dataDir, if one does.
func runningController(dataDir string) (int, bool) {
	pid, err := readPID(filepath.Join(dataDir, pidFile))
	if err != nil || !isController(pid, dataDir) {
		return 0, false
	}
	return pid, true
}

// looksLikeDataDir says whether dir holds what a controller keeps in its
// data directory, before kill-controller removes it all.
func looksLikeDataDir(dir string) bool {
	for _, name := range []string{logFile, pidFile, "etcd", "pki"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

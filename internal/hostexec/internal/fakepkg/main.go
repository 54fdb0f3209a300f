package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakepkg:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	db := os.Getenv("FAKEPKG_DB")
	if db == "" {
		return errors.New("FAKEPKG_DB not set")
	}
	if len(args) == 0 {
		return errors.New("usage: fakepkg query|install|remove NAME")
	}
	lock, err := os.OpenFile(db+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	installed := map[string]string{}
	data, err := os.ReadFile(db)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &installed); err != nil {
			return fmt.Errorf("%s: %w", db, err)
		}
	}
	fail := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("FAKEPKG_FAIL"), ",") {
		fail[n] = n != ""
	}
	switch verb, names := args[0], args[1:]; verb {
	case "query":
		sort.Strings(names)
		for _, n := range names {
			if v, ok := installed[n]; ok {
				fmt.Printf("%s %s\n", n, v)
			}
		}
		return nil
	case "install":
		slow := false
		for _, n := range strings.Split(os.Getenv("FAKEPKG_SLOW"), ",") {
			for _, a := range names {
				slow = slow || n != "" && strings.SplitN(a, "=", 2)[0] == n
			}
		}
		if d, err := time.ParseDuration(os.Getenv("FAKEPKG_SLEEP")); err == nil && slow {
			time.Sleep(d)
		}
		candidates := map[string]string{}
		for _, kv := range strings.Split(os.Getenv("FAKEPKG_CANDIDATES"), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				candidates[k] = v
			}
		}
		for _, a := range names {
			n, v, ok := strings.Cut(a, "=")
			if fail[n] {
				return fmt.Errorf("install %s: failing as FAKEPKG_FAIL asks", n)
			}
			if !ok {
				if v = candidates[n]; v == "" {
					v = "1.0"
				}
			}
			installed[n] = v
			if err := logLine("install " + n + " " + v); err != nil {
				return err
			}
		}
	case "remove":
		for _, n := range names {
			if fail[n] {
				return fmt.Errorf("remove %s: failing as FAKEPKG_FAIL asks", n)
			}
			if _, ok := installed[n]; !ok {
				return fmt.Errorf("remove %s: not installed", n)
			}
			delete(installed, n)
			if err := logLine("remove " + n); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown verb %q", verb)
	}
	out, err := json.Marshal(installed)
	if err != nil {
		return err
	}
	tmp := db + ".tmp"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, db)
}

// logLine appends line to FAKEPKG_LOG, if set.
func logLine(line string) error {
	p := os.Getenv("FAKEPKG_LOG")
	if p == "" {
		return nil
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

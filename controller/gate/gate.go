package gate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Question is what a gate is asked about one unit.
type Question struct {
	Service string   `json:"service"`
	Unit    string   `json:"unit"`
	Machine string   `json:"machine"`
	From    int64    `json:"from"`
	To      int64    `json:"to"`
	Changes []Change `json:"changes"`
}

// Change is one difference between the revisions: a configuration key's
// values, or the charm ("charm", its old and new names and revisions).
type Change struct {
	Key string `json:"key"`
	Old string `json:"old"`
	New string `json:"new"`
}

// Decision is a gate's word on a unit.
type Decision string

// The decisions.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Retry Decision = "retry"
)

// Verdict is a gate's answer, or what stands for one when the gate did
// not answer well (Retry, with Failed set and Reason saying why).
type Verdict struct {
	Decision   Decision
	Reason     string
	RetryAfter time.Duration
	// Failed says the gate did not answer: it erred, timed out or said
	// something that is not an answer.
	Failed bool
}

// Gate answers questions.
type Gate interface {
	// Name is the gate's name, as operators set it on a service.
	Name() string
	// Ask asks q and returns the verdict; it never fails, a failure is a
	// Retry verdict.
	Ask(ctx context.Context, q Question) Verdict
}

// Limits of every ask.
const (
	// DefaultTimeout bounds an ask when Config.Timeout is zero.
	DefaultTimeout = 10 * time.Second
	// MaxAnswerBytes is the most of an answer read; a longer one is not
	// an answer.
	MaxAnswerBytes = 64 << 10
	// MaxReasonBytes bounds the reason kept of an answer.
	MaxReasonBytes = 1 << 10
	// MaxRetryAfter bounds the retry_after an answer may ask for.
	MaxRetryAfter = time.Hour
	// DefaultConcurrency is how many asks of one gate run at once when
	// Config.Concurrency is zero.
	DefaultConcurrency = 8
)

// Config is how gates are made.
type Config struct {
	// Timeout bounds each ask; DefaultTimeout when zero.
	Timeout time.Duration
	// Concurrency bounds the asks of one gate that run at once (the
	// others wait for their turn, within their own timeout);
	// DefaultConcurrency when zero.
	Concurrency int
	// RootCAs verifies HTTPS gates; the host's roots when nil.
	RootCAs *x509.CertPool
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// ValidName reports whether name may name a gate: lower-case letters,
// digits and dashes, starting with a letter, at most 32.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Parse makes the gate of spec, NAME=COMMAND or NAME=https://URL.
func Parse(spec string, cfg Config) (Gate, error) {
	name, target, ok := strings.Cut(spec, "=")
	switch {
	case !ok || target == "":
		return nil, fmt.Errorf("rollout gate %q: want NAME=COMMAND or NAME=https://URL", spec)
	case !ValidName(name):
		return nil, fmt.Errorf("rollout gate %q: invalid name %q: lower-case letters, digits and dashes, starting with a letter, at most 32", spec, name)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	b := base{name: name, cfg: cfg, turns: make(chan struct{}, cfg.Concurrency)}
	switch {
	case strings.HasPrefix(target, "https://"):
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}
		return &httpsGate{base: b, url: target, client: &http.Client{Transport: tr}}, nil
	case strings.HasPrefix(target, "http://"):
		return nil, fmt.Errorf("rollout gate %q: a gate's URL must be https://", name)
	}
	return &programGate{base: b, command: target}, nil
}

// base is what both kinds of gate share.
type base struct {
	name  string
	cfg   Config
	turns chan struct{}
}

func (b *base) Name() string { return b.name }

// ask runs call within the gate's limits and turns what it returns into a
// verdict.
func (b *base) ask(ctx context.Context, q Question, call func(ctx context.Context, question []byte) ([]byte, error)) Verdict {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	select {
	case b.turns <- struct{}{}:
		defer func() { <-b.turns }()
	case <-ctx.Done():
		return failed("gate %q: no turn within %s: %d asks of it already running", b.name, b.cfg.Timeout, cap(b.turns))
	}
	question, err := json.Marshal(q)
	if err != nil {
		return failed("gate %q: %v", b.name, err)
	}
	answer, err := call(ctx, question)
	if ctx.Err() != nil {
		return failed("gate %q: no answer within %s", b.name, b.cfg.Timeout)
	}
	if err != nil {
		return failed("gate %q: %v", b.name, err)
	}
	v, err := parseAnswer(answer)
	if err != nil {
		return failed("gate %q: %v", b.name, err)
	}
	return v
}

func failed(format string, args ...any) Verdict {
	return Verdict{Decision: Retry, Reason: truncate(fmt.Sprintf(format, args...)), Failed: true}
}

// answer is an answer's JSON.
type answer struct {
	Decision   Decision        `json:"decision"`
	Reason     string          `json:"reason"`
	RetryAfter json.RawMessage `json:"retry_after"`
}

func parseAnswer(data []byte) (Verdict, error) {
	var a answer
	if err := json.Unmarshal(data, &a); err != nil {
		return Verdict{}, fmt.Errorf("answer is not JSON: %v", err)
	}
	switch a.Decision {
	case Allow, Deny, Retry:
	default:
		return Verdict{}, fmt.Errorf("answer's decision %q is not allow, deny or retry", a.Decision)
	}
	v := Verdict{Decision: a.Decision, Reason: truncate(a.Reason)}
	if len(a.RetryAfter) > 0 && string(a.RetryAfter) != "null" {
		d, err := parseRetryAfter(a.RetryAfter)
		if err != nil {
			return Verdict{}, err
		}
		v.RetryAfter = d
	}
	return v, nil
}

// parseRetryAfter reads seconds (a number) or a duration ("1m30s").
func parseRetryAfter(raw json.RawMessage) (time.Duration, error) {
	var d time.Duration
	var secs float64
	var s string
	switch {
	case json.Unmarshal(raw, &secs) == nil:
		d = time.Duration(secs * float64(time.Second))
	case json.Unmarshal(raw, &s) == nil:
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("answer's retry_after %q is not a duration", s)
		}
	default:
		return 0, fmt.Errorf("answer's retry_after %s is neither seconds nor a duration", raw)
	}
	if d < 0 || d > MaxRetryAfter {
		return 0, fmt.Errorf("answer's retry_after %s is not between 0 and %s", d, MaxRetryAfter)
	}
	return d, nil
}

func truncate(s string) string {
	if len(s) <= MaxReasonBytes {
		return s
	}
	return strings.ToValidUTF8(s[:MaxReasonBytes], "")
}

// programGate runs a command on the controller's host.
type programGate struct {
	base
	command string
}

func (g *programGate) Ask(ctx context.Context, q Question) Verdict {
	return g.ask(ctx, q, g.run)
}

func (g *programGate) run(ctx context.Context, question []byte) ([]byte, error) {
	cmd := exec.Command("/bin/sh", "-c", g.command)
	cmd.Stdin = bytes.NewReader(question)
	var out, errOut limitedBuffer
	out.max, errOut.max = MaxAnswerBytes+1, MaxReasonBytes
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// Its own process group, so that a timeout kills what the command
	// started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return nil, ctx.Err()
	}
	if err != nil {
		msg := strings.TrimSpace(errOut.String())
		if msg == "" {
			return nil, err
		}
		return nil, fmt.Errorf("%v: %s", err, msg)
	}
	if out.Len() > MaxAnswerBytes {
		return nil, fmt.Errorf("answer longer than %d bytes", MaxAnswerBytes)
	}
	return out.Bytes(), nil
}

// limitedBuffer keeps the first max bytes written to it and takes (and
// drops) the rest, so that a chatty command is not blocked on its pipe.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// httpsGate POSTs to an HTTPS endpoint.
type httpsGate struct {
	base
	url    string
	client *http.Client
}

func (g *httpsGate) Ask(ctx context.Context, q Question) Verdict {
	return g.ask(ctx, q, g.post)
}

func (g *httpsGate) post(ctx context.Context, question []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(question))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, errors.Unwrap(err) // the url.Error's own words name the URL again
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	switch {
	case err != nil:
		return nil, err
	case len(body) > MaxAnswerBytes:
		return nil, fmt.Errorf("answer longer than %d bytes", MaxAnswerBytes)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("answered %s: %s", resp.Status, truncate(strings.TrimSpace(string(body))))
	}
	return body, nil
}

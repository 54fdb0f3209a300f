package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxJoinFile bounds what --join-file reads: a token is a few kilobytes.
const maxJoinFile = 64 << 10

// readJoinToken reads a join token from the file named, or from stdin
// when the name is "-".
func readJoinToken(name string, stdin io.Reader) (pki.JoinToken, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return pki.JoinToken{}, fmt.Errorf("join token: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxJoinFile+1))
	if err != nil {
		return pki.JoinToken{}, fmt.Errorf("join token: %w", err)
	}
	if len(data) > maxJoinFile {
		return pki.JoinToken{}, usageError{fmt.Errorf("join token: %s holds more than %d bytes: not a join token", name, maxJoinFile)}
	}
	tok, err := pki.DecodeJoinToken(string(data))
	if err != nil {
		return pki.JoinToken{}, usageError{err}
	}
	return tok, nil
}

// joinMachine joins the machine tok names and writes its agent config to
// path. The host makes the machine's credential and keeps it, until the
// join is done, in path+".joining": should the join's answer be lost (a
// crash, a broken connection), the token is used and the credential
// stored, and a run again finds the token refused but the credential
// accepted, and goes on with it.
func joinMachine(ctx context.Context, logger hclog.Logger, path string, tok pki.JoinToken, controllers []string) error {
	tag := names.MachineTag(tok.Machine)
	addrs := slices.Clone(controllers)
	for _, a := range tok.Controllers {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	pending := path + ".joining"
	cfg, err := pki.ReadClientConfig(pending)
	if err != nil || cfg.Tag != tag {
		// No join tried before (or one for another machine, or a file
		// damaged): a new credential.
		cred, _, err := pki.NewCredential(tag)
		if err != nil {
			return err
		}
		cfg = pki.ClientConfig{Tag: cred.Tag, Secret: cred.Secret}
	}
	cfg.Controllers, cfg.CACert = addrs, tok.CACert
	if err := pki.WriteClientConfig(pending, cfg); err != nil {
		return err
	}
	dial := apiclient.FromClientConfig(cfg)
	dial.Credential = pki.Credential{}
	conn, err := apiclient.Dial(dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	logger.Info("joining", "machine", tok.Machine, "controllers", addrs, "token expires", tok.Expires.Format(time.RFC3339))
	err = machineagent.Join(ctx, pb.NewMachineJoinServiceClient(conn), tok, cfg.Credential())
	if errors.Is(err, machineagent.ErrJoinRefused) {
		// Perhaps refused because an earlier try of this host used it.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, cerr := pb.NewAgentServiceClient(apiclient.As(conn, cfg.Credential())).GetAgentSettings(cctx, &pb.GetAgentSettingsRequest{})
		cancel()
		if cerr == nil {
			logger.Info("the token was used by an earlier try of this host: its credential works", "machine", tok.Machine)
			err = nil
		}
	}
	if err != nil {
		return err
	}
	if err := pki.WriteClientConfig(path, cfg); err != nil {
		return err
	}
	if err := os.Remove(pending); err != nil {
		logger.Warn("cannot remove the join's credential file", "file", pending, "error", err)
	}
	logger.Info("joined", "machine", tok.Machine, "config", path)
	return nil
}

package e2etest

import (
	"context"
	"fmt"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// JoinMachine joins a manual machine with its join token as its host's
// agent does (a credential made here, the token taken by the controller
// once), for a test that then calls as the machine: it returns the
// machine's client config.
func JoinMachine(ctx context.Context, token string) (pki.ClientConfig, error) {
	tok, err := pki.DecodeJoinToken(token)
	if err != nil {
		return pki.ClientConfig{}, err
	}
	cred, _, err := pki.NewCredential("machine-" + tok.Machine)
	if err != nil {
		return pki.ClientConfig{}, err
	}
	conn, err := apiclient.Dial(apiclient.Config{Addresses: tok.Controllers, CACert: []byte(tok.CACert)})
	if err != nil {
		return pki.ClientConfig{}, err
	}
	defer conn.Close()
	if err := machineagent.Join(ctx, pb.NewMachineJoinServiceClient(conn), tok, cred); err != nil {
		return pki.ClientConfig{}, fmt.Errorf("join machine %s: %w", tok.Machine, err)
	}
	return pki.ClientConfig{Controllers: tok.Controllers, CACert: tok.CACert, Tag: cred.Tag, Secret: cred.Secret}, nil
}

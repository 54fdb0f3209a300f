package provider

import (
	"context"
	"errors"

	"github.com/lifelinehq/lifeline/internal/pki"
)

// Provider starts and stops instances.
type Provider interface {
	// Start starts an instance running machine spec.ID's agent with the
	// given agent config, or restarts the agent of the machine's existing
	// instance. It returns ErrManual when the provider starts nothing.
	Start(ctx context.Context, spec MachineSpec) (Instance, error)
	// Stop stops an instance and everything on it; a missing one is no
	// error.
	Stop(ctx context.Context, instanceID string) error
	// Instances lists the provider's instances, running or not.
	Instances(ctx context.Context) ([]Instance, error)
}

// MachineSpec is what an instance is started for.
type MachineSpec struct {
	ID string
	// Agent is the machine agent's config: controllers, CA, credential.
	Agent pki.ClientConfig
}

// Instance is an instance the provider has.
type Instance struct {
	ID        string
	MachineID string
	Address   string
	// Running says the machine's agent runs on it.
	Running bool
}

// ErrManual is a provider's answer when it starts no instances.
var ErrManual = errors.New("the provider starts no instances: machines join with a token")

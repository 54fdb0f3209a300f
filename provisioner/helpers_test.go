package provisioner_test

import (
	"time"

	"github.com/lifelinehq/lifeline/internal/pki"
)

func agentConfig() pki.ClientConfig {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		panic(err)
	}
	cred, _, err := pki.NewCredential("machine-7")
	if err != nil {
		panic(err)
	}
	return pki.ClientConfig{Controllers: []string{"127.0.0.1:1"}, CACert: string(ca.CertPEM()), Tag: cred.Tag, Secret: cred.Secret}
}

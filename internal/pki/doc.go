// Package pki owns Lifeline's transport security and credentials
// (docs/DESIGN.md, The API):
//
//   - the controller's certificate authority (a self-signed ECDSA P-256 CA,
//     kept as ca.pem and ca-key.pem in the controller's data directory) and
//     the server certificate it issues (server.pem, server-key.pem);
//   - the key-encryption key (KEK, kept as ca-kek beside the CA) with which
//     the controllers seal the CA key (AES-256-GCM) before it is stored in
//     etcd, so that whoever reads etcd cannot sign as the controller;
//   - the one-time token with which a controller joins the others
//     (ControllerJoin) to receive that key-encryption key;
//   - the TLS configurations of the server and of its clients, which pin the
//     controller's CA instead of trusting the system roots;
//   - credentials: an entity's tag (whose syntax package names owns: "admin",
//     "user-alice", "machine-3", "unit-kv/0") with a random secret, and the hashes of
//     secrets that the controller stores in place of the secrets themselves;
//   - join tokens: what a manual machine's host needs to join (the
//     controllers, their CA, the machine, a secret the controller takes
//     once, an expiry), which are not credentials;
//   - the operator's client config file (JSON, mode 0600, written
//     atomically), which holds the controller addresses, the CA certificate
//     and the user's credential;
//   - the tokens handed over by hand: a manual machine's join token, and a
//     new user's registration token (addresses, the CA's fingerprint, a
//     one-time secret; no credential);
//   - WriteFileAtomic, the synced replace-by-rename these files are written
//     with, which other packages' durable records use too.
//
// It provides primitives and stores nothing but files in directories its
// caller names. It must not touch etcd (storing, replacing and deleting the
// hashes of credentials is package state's job), must not import gRPC (the
// controller wires the metadata keys and TLS configurations defined here into
// its server and clients), and reads no flags and no environment, except
// DefaultClientConfigPath, which exists for main to call.
package pki

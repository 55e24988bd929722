// Package worker is a fleet member: it serves the operations a handler
// (with the exec pipeline of package runner registered on it) answers to
// the NATS fleet — the intake queue per vault, direct requests from
// clients, fencing by ownership epoch, handoff of a vault's content by
// hash between workers, the vault and approval catalogs it writes, the
// audit stream, the sweep of expired vaults and `vault.push` to a fork's
// owner for a merge. Around an exec it adds what only a fleet knows: that
// this worker still owns the vault (and, for approval.grant, that the
// approval's vault did not move since the command was held), and the
// command's live output published to the caller's inbox
// (runner.WithOutput).
//
// A delivery is fenced first (fence.go: a request for a vault this
// worker does not own goes back to the intake as a message); then the
// handler decodes it once, serves it through the handler's core wrapped
// in the fleet's layers (core.go: progress heartbeats, catalogs, "moved
// while running", handoff before/after, approval grants), and encodes
// the typed result once. The handoff reaches the store only through
// replicaStore, the few operations it needs, declared where it is used.
// Test faults are wrappers too (ServeOptions.Wrap, NoProgress).
//
// A fleet member is composed by Open: a node (package node: store,
// handler, exec pipeline) and a Server around it; `avfs serve`, `avfs
// worker` and the e2e fixtures start workers that way (NewServer serves
// a node the caller keeps, for tests that restart a server on one node).
//
// The exec pipeline itself (validate → policy → checkpoint → mount → run
// → changes → envelope → audit) is runner's, which imports nothing of
// worker and no NATS package.
//
// Lock order: a vault's reconcile lock (handoff.locks), then handoff.mu.
// Server.mu and handoff.mu guard maps and are not held across a handled
// request; the runner's locks (see package runner) are taken inside one.
package worker

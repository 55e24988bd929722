// Package worker is a fleet member: it serves the operations a handler
// (with the exec pipeline of package runner registered on it) answers to
// the NATS fleet — the intake queue per vault, direct requests from
// clients, fencing by ownership epoch, handoff of a vault's content by
// hash between workers, the vault and approval catalogs it writes, the
// audit stream, the sweep of expired vaults, `vault.push` to a fork's
// owner for a merge, and the garbage collection of the fleet's chunk
// bucket (CollectChunks, chunkgc.go), which its pushes and pulls take part
// in. Around an exec it adds what only a fleet knows: that
// this worker still owns the vault (and, for approval.grant, that the
// approval's vault did not move since the command was held), and the
// command's live output published to the caller's inbox
// (runner.WithOutput).
//
// The exec pipeline itself (validate → policy → checkpoint → mount → run
// → changes → envelope → audit) is runner's, which imports nothing of
// worker and no NATS package.
//
// Lock order: a vault's reconcile lock (handoff.locks), then handoff.mu.
// Server.mu and handoff.mu guard maps and are not held across a handled
// request; the runner's locks (see package runner) are taken inside one.
package worker

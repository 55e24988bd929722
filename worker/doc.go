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
// The exec pipeline itself (validate → policy → checkpoint → mount → run
// → changes → envelope → audit) is runner's, which imports nothing of
// worker and no NATS package.
//
// Every change is held by the fleet's change log before it is answered
// (changelog.go, docs/decisions.md §25): appended as a replayable entry,
// or kept by a snapshot push pinned to a log entry; appends are fenced by
// the log's expected last sequence, and a new owner applies the head's
// snapshot and the entries after it.
//
// Lock order: a vault's reconcile lock (handoff.locks), released before
// the request is handled; then the vault's log lock (changelog.locks),
// held from the handling of a change to its append (and by a push while
// it pins and exports the snapshot), a fork's source's before its new
// target's; then handoff.mu and changelog.mu, which guard maps and are
// never held across a call out. Server.mu is not held across a handled
// request; the runner's locks (see package runner) are taken inside one.
package worker

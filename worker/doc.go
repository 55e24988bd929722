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
// Every change is held by the fleet's change log before it is answered
// (changelog.go, docs/decisions.md §30): appended as a replayable entry,
// or kept by a snapshot push pinned to a log entry; appends are fenced by
// the log's expected last sequence, and a new owner applies the head's
// snapshot and the entries after it. A copy that got ahead of its log
// outside the requests (the worker's own mounts, a background run) is
// pushed by a loop that looks every second (ahead.go), taking a vault's
// log lock only when it is free (TryLock); an fsync through the worker's
// own mounts pushes one before it returns (mountsync.go, called by the
// mount from a FUSE request, holding no lock of the mount's). When
// fleet.gc_interval is set,
// a loop looks about once per interval whether the fleet's chunk bucket
// needs a sweep and claims it for this worker (periodicgc.go).
//
// Lock order (outermost first); no lock of this package is held across a
// call into the core, where the runner's locks are taken (see runner),
// except a vault's log lock (3):
//
//  1. A vault's queue: one goroutine drains it (Server.drain), so
//     requests to one vault run one at a time. Not a mutex, but
//     everything below may be taken while a vault's request runs.
//  2. handoff.locks[k], a vault's reconcile lock: held across reconcile
//     (head read, pull from the buckets, store writes, the log's
//     takeover), taken by before (from the queue, or from an approval
//     grant beside it) and by servePush, and released before the request
//     is handled. Push jobs never take it: a push and a reconcile of one
//     vault may overlap, and the head's compare-and-set (moveHead)
//     orders them.
//  3. changelog.locks[k], a vault's log lock: held from the handling of a
//     change to its append (and by a push while it pins and exports the
//     snapshot, and by the catch-up loop and a mount's fsync while they
//     push; the fsync waits for it by polling TryLock, and gives up when
//     its mount closes: mount.stop holds it while it unmounts); a fork's
//     source's before its new target's, and taken again by the source's
//     result entry (keepResult) after the target is kept.
//  4. handoff.mu and changelog.mu: guard maps (jobs, served, dirty,
//     checked, locks, stopped, the bucket handles; last, since, pos,
//     modes). Taken under the locks above, never the reverse; never held
//     across I/O, a store call or a NATS call.
//  5. The batch mutex of one pull or upload (local to it): a leaf.
//
// Leaves, each taken alone and never across I/O: Server.mu (queues, seen,
// busy, directOff; put sends on a vault's queue under it, which the
// queue's capacity keeps from blocking), catalog.mu (dirty, epochs),
// peers.mu, the objects' mutex (transfer.go) and an output stream's
// (output.go).
package worker

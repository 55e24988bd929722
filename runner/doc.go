// Package runner is the exec pipeline: where vault, mount, policy and exec
// meet. It runs agents' commands in vaults — validate → policy → mount
// (and the vault's run lock) → auto-checkpoint → run → change summary →
// envelope → audit — keeps each active vault mounted between commands, holds commands that
// need an operator's approval and runs them once granted, serves
// background runs (exec.start, run.*) and user mounts (mount.start). It
// registers these operations on a handler.Handler (Wire, Runner.Register),
// so the CLI's in-process mode and a fleet worker serve them the same way;
// package node, the composition root, calls Wire with the parts it owns
// (Parts: store, handler, worker id, logger, tracer, meter).
//
// runner links no NATS package (nats.go, nats-server, micro, jetstream)
// and nothing of worker or dispatcher; scripts/importrules.sh checks it.
// What the fleet adds around a command — that this worker still owns the
// vault, handoff before and after, live output published to a caller's
// inbox — wraps the handler from the outside (worker.Server) or comes in
// through the context (WithOutput). Parts.Serving is the one fact
// about the process runner needs: it then keeps sandbox inits alive.
//
// Every command runs in an exec.Sandbox unless its vault's sandbox mode is
// none (sandbox.go): the system's and the toolchains' directories
// read-only, the vault's mount writable at its host path, the worker's
// home and every mount root hidden; the network only when the vault's
// configuration, or the policy rule that decided the command, grants it;
// each namespace's own Go build cache writable (never one shared by
// tenants); limits a command asks for only when they lower its vault's.
// The envelope and the audit event record the mode, the network given
// and why, the limits, the limit hit and what the sandbox refused. A
// serving process (Parts.Serving) keeps a sandbox init per vault layout
// between commands (exec.Pool, closed by Runner.Close).
//
// Invariants: the policy decides before anything is mounted, so a denied
// or held command costs no mount (it judges paths against the mount's
// directory as a string, known before the mount exists); a request id seen before returns the stored envelope of the
// first completed run, never a second run; a held command runs at most
// once (the approval's pending→running transition is atomic); commands in
// one vault run one at a time, in order (the vault's run lock, extended to
// other processes by flock).
//
// Lock order: Mounts.mu, then a vault's run lock; no lock is held while a
// command runs except that vault's run lock. Background runs: runs.mu,
// then a runLog's mu.
package runner

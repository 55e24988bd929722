// Package worker is where vault, mount, policy and exec meet: it runs
// agents' commands in vaults (validate → policy → auto-checkpoint → mount
// → run → change summary → envelope → audit), keeps each active vault
// mounted between commands, and holds commands that need an operator's
// approval. It registers these operations on a handler.Handler, so the
// CLI's in-process mode and a fleet worker serve them the same way.
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
// serving process (Wire's serving) keeps a sandbox init per vault layout
// between commands (exec.Pool, closed by Runner.Close).
//
// Lock order: Mounts.mu, then a vault's run lock; no lock is held while a
// command runs except that vault's run lock.
package worker

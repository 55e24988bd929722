// Package worker is where vault, mount, policy and exec meet: it runs
// agents' commands in vaults (validate → policy → auto-checkpoint → mount
// → run → change summary → envelope → audit), keeps each active vault
// mounted between commands, and holds commands that need an operator's
// approval. It registers these operations on a handler.Handler, so the
// CLI's in-process mode and a fleet worker serve them the same way.
//
// Lock order: Mounts.mu, then a vault's run lock; no lock is held while a
// command runs except that vault's run lock.
package worker

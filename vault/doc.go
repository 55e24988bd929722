// Package vault owns the agent workspaces: their files, directories and
// symlinks, named checkpoints, forks, quotas, audit log and request log, all
// kept in one SQLite database per home (the Store).
//
// Data model (see docs/decisions.md): a vault's tree is a copy-on-write tree
// of nodes. Content lives in content-addressed chunks (SHA-256, 64 KiB),
// shared by every vault, checkpoint and fork in the store. A node may be
// changed in place only while it belongs to the vault's current epoch;
// saving a checkpoint or forking bumps the epoch, which freezes every
// existing node, so checkpoint and fork are O(1) metadata operations and the
// first later write copies only the directories on its path.
//
// A file's chunk list holds one SHA-256 per chunk of content and one
// hole record per run of chunks that read as zeros (chunklist.go): a
// hole costs one record whatever its length, so sparse files cost what
// their content costs, in space and time.
//
// An inode with several names (a hard link, links.go) lives in a hidden
// directory of the root, under its inode number; each name is a stub
// that names it, and everything done to the inode goes to the hidden
// entry, so one copy serves every name and checkpoints, forks, export and
// GC carry it like any subtree.
//
// Every committed write transaction on a vault takes the next number of
// its change sequence and stamps its audit events with it (log.go):
// another process that caches the vault (a mount) follows the log to
// learn what changed.
//
// A fork keeps the tree it started from as its hidden checkpoint
// ".fork-point", so Merge can bring its changes back three-way
// (merge.go); hidden checkpoints (names starting with '.') are not
// listed, and an export keeps only that one.
//
// Invariants:
//   - A node whose (vault, epoch) differs from its vault's current one is
//     immutable: checkpoints and forks may share it.
//   - Every mutation runs in one BEGIN IMMEDIATE transaction that also
//     writes its audit event and, when a request id is given, its request
//     log entry, so a repeated request returns the stored result.
//   - A rejected mutation (bad path, quota, conflict) changes nothing.
//   - A mutation returns only once the transaction holding it committed.
//     Writers queued behind one another share a transaction (group
//     commit, group.go), each under its own savepoint, so one's failure
//     rolls back only its part.
//
// Locks: the writer lock (Store.wmu) is taken through queueWriter (a
// group's writer) or lockWriter (anything else, which commits an open
// group first), never directly; it comes before stmtMu and auditMu.
//
// Vault knows nothing of NATS, FUSE or exec: callers wrap it.
package vault

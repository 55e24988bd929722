// Package mount serves a vault as a real directory through FUSE
// (go-fuse), so that git, go, cargo and make run in it unchanged. It owns
// the translation only: names, attributes, open files and errno values.
// The vault owns the semantics: every change made through the mount is a
// vault transaction, audited with Options.Meta, counted against the
// quotas and visible in vault.Diff. The vault knows nothing of this
// package.
//
// # Requests and caching
//
// A kernel round trip costs about as much as a small vault write, so the
// mount keeps requests few:
//   - Lookups, attributes and directory listings are answered from an
//     in-memory copy of the tree (entries), loaded one directory at a time
//     with one read transaction. The kernel caches names, attributes and
//     misses for a minute (Options), and directory listings and file pages
//     until told otherwise: the kernel sees every change made through the
//     mount, and the mount tells it of changes made behind its back (see
//     Coherence).
//   - Writes and truncations are buffered per file, shared by all its
//     descriptors, and committed in one transaction on flush (close),
//     fsync, the last release, Sync or Close. A commit rewrites only the
//     chunks it touches. With Options.QueueCloses, in a vault without
//     quotas, which nothing can refuse, a close queues the file's changes
//     instead, like a removal (Mount.commitLater), so a burst of closes
//     costs one transaction; so is a hard link. The writeback cache stays off: with it the kernel
//     trusts its own file sizes, which a checkpoint restore must be able
//     to change.
//   - Removals, renames and chmod/utimens, which no quota can refuse, are
//     checked against the in-memory tree, answered at once and queued; the
//     queue rides on the next transaction, or is committed alone within
//     5 ms, so rm -rf or git's renames cost a transaction per burst, not
//     per file. Every vault read the mount makes commits the queue first
//     (a read of file content or of a directory's first listing leaves
//     access times alone queued, so a cold read of many files does not
//     commit one per file).
//   - Creates of files and directories are queued the same way when the
//     vault has no max_files quota (the one limit an empty entry can
//     break): the inode number the kernel gets comes from a block the
//     mount reserved in the vault (vault.Tx.ReserveInos) in an earlier
//     transaction. A new file's create thus rides on the commit of its
//     content when it is closed, and a file written from the start is
//     created with that content in one vault write. Each queued change is
//     recorded with the time the mount answered it (vault.Tx.AtTime), so
//     the vault holds the times the kernel was shown. A file created and
//     closed with nothing written commits its create at close; fsync of a
//     directory commits the queue.
//   - The committed content of small files (up to 1 MiB, 64 MiB in all,
//     least recently used out) stays in memory after a read or a commit:
//     files written through the mount are read back without a query (the
//     kernel keeps no page that was only partly written).
//   - ACCESS (default_permissions), xattr requests (the vault has no
//     extended attributes), OPENDIR and RELEASEDIR (answered ENOSYS once,
//     see noOpendir; Linux 5.1 or later) are not sent at all; read-only
//     descriptors ask for no FLUSH. Without OPENDIR each READDIR is served
//     from a fresh listing, so a listing's offsets are inode numbers, not
//     positions (dirStream): a program that removes or adds entries while
//     it reads a directory (git clean, remove_dir_all) resumes where it
//     was.
//
// # Coherence
//
// Every transaction on a vault, whichever process makes it, takes the
// next number of the vault's change sequence and stamps its audit events
// with it (vault.LogPos, vault.Log). The mount polls that position every
// Options.Poll (200 ms; one indexed row) and, when another writer moved
// it, reads the events since, re-reads the cached directories they touch
// (or every cached directory after a restore, an import or too many
// events), updates the entries that differ and sends the kernel
// NotifyEntry for names that came or went and NotifyContent for changed
// attributes, listings and files. So `avfs write` from another process,
// an exec through a worker's mount, a restore or a handoff shows in the
// mount within the poll interval; Refresh catches up at once (the worker
// calls it before each command and after each API change). The mount's
// own queued changes are committed before it re-reads, so they are
// neither lost nor undone, and its own commits are recognised by their
// sequence numbers and cost nothing. A file with buffered writes keeps
// them (they win when committed); an open file whose content changed
// elsewhere reads the new content; one removed elsewhere reads its
// cached content, if any, else EIO.
//
// # Invariants
//
//   - Changes made behind the mount's back are shown within
//     Options.Poll (Coherence). Invalidate, which drops every cache and
//     fails open descriptors with ESTALE, remains for a vault replaced
//     wholesale. The vault API sees a change made through the mount once
//     Sync returns (queued changes within 5 ms anyway, a file and its
//     contents when the file is closed, or within 5 ms of the close
//     when Options.QueueCloses queued it).
//   - No single request can take the process down: a handler that
//     panics answers EIO (go-fuse recovers it), and no request allocates
//     by a size it names: holes in sparse files cost nothing (the vault's
//     chunk lists keep them as runs), a file cannot grow past the store's
//     max_file_size (EFBIG), reads and copies are bounded per request,
//     and buffered writes are bounded too: past MaxDirty in one file, or
//     four times that in all files, a file commits early, and an
//     unlinked file's writes (which go nowhere) fail with ENOSPC past
//     64 MiB.
//   - Inode numbers are the vault's (vault.Entry.Ino): stable across
//     mounts, never reused within a vault, so the generation is always 1.
//     A queued create's number is reserved before the kernel sees it;
//     numbers reserved and never used are skipped.
//   - A commit is all or nothing. One that fails, on a quota for
//     instance, drops that file's buffered changes: the vault and the
//     mount both keep the previous content (a new file stays, empty), and
//     close(2) or fsync(2) reports the error. With Options.QueueCloses
//     a close commits at once only in a vault with a quota, the one
//     refusal a write can meet; elsewhere a failure of the queued
//     content (a full disk) is logged and the mount resynchronises, as
//     for any queued change. Writes past MaxDirty commit early, so a very
//     large file may be committed in parts.
//   - An unlinked file stays readable through descriptors opened before
//     (up to 64 MiB of committed content is kept in memory), but its
//     writes go nowhere.
//   - Owners, modes and permissions are POSIX's: an entry belongs to the
//     process that created it (the request's caller; the vault records
//     NoOwner for entries made through its API, shown as the mounting
//     user's), keeps setuid, setgid and sticky bits, and takes the group
//     of a setgid directory (vault.Inherit). The kernel checks every
//     caller against them (default_permissions): who may chown, chmod,
//     remove in a sticky directory, and what a chown or a write by
//     another user clears (it sends the new mode). Options.AllowOther
//     lets other users in.
//   - Fifos, sockets and device nodes are vault entries; the kernel
//     serves their opens (the mount is nodev and nosuid, as FUSE mounts
//     are by default, so a device node cannot be opened through it).
//   - Directories count 2 links plus their subdirectories. Access times
//     follow relatime for the reads that reach the mount (a read served
//     from the kernel's page cache does not). A name over 255 bytes is
//     ENAMETOOLONG for every call; a path from the vault root may be far
//     longer than 4,096 bytes (vault.MaxTreePathLen).
//   - Hard links are vault hard links (vault.Tx.Link): one inode, one
//     number, under several names, with its link count. An entry keeps
//     every name the mount has seen for it (entry.links); its path, for
//     the vault, is any of them. link(2) and RENAME_EXCHANGE commit at
//     once.
//   - O_TMPFILE: the unnamed file lives in memory (at most 64 MiB, as an
//     unlinked file's content) until linkat gives it a name, which
//     creates it in the vault, under the inode number reserved for it,
//     with its content; closed unnamed, it leaves nothing.
//   - Not supported: extended attributes (EOPNOTSUPP). POSIX locks are
//     handled by the kernel locally.
//
// # Locks
//
// Lock order: follower.mu, then Mount.nsMu, then fileData.mu, then
// queue.tx, then queue.mu, then Mount.mu. A catch-up (follower.mu) holds
// nsMu exclusively while it re-reads and applies, and then the fileData
// of every file it may touch at once: nobody else holds two of those, as
// only holders of nsMu exclusively would. nsMu is held exclusively by create, remove and
// rename, and shared by everything else that resolves a vault path and
// then calls the vault, so a path stays right for the length of the call;
// the timer's commit of the queue needs no path and holds none. queue.tx
// is held across every vault write, which takes the whole queue, so none
// can run on a tree that misses a queued change; queue.mu only guards the
// queue, so changes are queued while one commits. Mount.mu guards the
// entry cache and is never held across a vault call. No lock is held across a kernel notification: the kernel
// may wait for a request in flight to finish, and that request may wait
// for the lock. Vault calls made for the kernel use the mount's own
// context, not the request's, which any signal to the calling process
// cancels.
package mount

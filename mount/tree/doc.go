// Package tree is a vault's tree as a file system shows it, without a
// kernel: entries in memory, per-file write buffers, and a queue of
// changes answered at once and committed later. It answers by inode
// number, entry and open file, in POSIX's vocabulary (errno values,
// rename(2)'s and unlink(2)'s checks, link counts, access times), so
// that a caller (package mount, which translates FUSE requests) only
// translates. It imports only package vault, and is tested against a
// model without /dev/fuse (model_test.go).
//
// The vault owns the semantics: every change is a vault transaction,
// audited with Options.Meta, counted against the quotas and visible in
// vault.Diff. The tree checks a change against its copy before answering
// only where the vault could not refuse it once the check passed.
//
// # Requests and caching
//
//   - Lookups, attributes and directory listings are answered from an
//     in-memory copy of the tree (entries), loaded one directory at a time
//     with one read transaction.
//   - Writes and truncations are buffered per file, shared by all its
//     open Files, and committed in one transaction on Flush (close),
//     Fsync, the last Release, Sync or Close. A commit rewrites only the
//     chunks it touches. With Options.QueueCloses, in a vault without
//     quotas, which nothing can refuse, a close queues the file's changes
//     instead, like a removal (Tree.commitLater), so a burst of closes
//     costs one transaction; so is a hard link.
//   - With Options.QueueCloses, removals, renames and chmod/utimens,
//     which no quota can refuse, are checked against the in-memory tree,
//     answered at once and queued; the
//     queue rides on the next transaction, or is committed alone within
//     Options.FlushDelay (20 ms), so rm -rf or git's renames cost a
//     transaction per burst, not per file. Every vault read the tree makes
//     commits the queue first (a read of file content or of a directory's
//     first listing leaves access times alone queued, so a cold read of
//     many files does not commit one per file).
//     Without it they are committed before they are answered, so that a
//     change the caller saw happen is in the vault before anything the
//     caller does next (a restore through the API, say); access times
//     stay queued, and a file's create waits for its close.
//   - Creates of files and directories are queued the same way when the
//     vault has no max_files quota (the one limit an empty entry can
//     break): the inode number answered comes from a block the tree
//     reserved in the vault (vault.Tx.ReserveInos) in an earlier
//     transaction. A new file's create thus rides on the commit of its
//     content when it is closed, and a file written from the start is
//     created with that content in one vault write. Each queued change is
//     recorded with the time the tree answered it (vault.Tx.AtTime), so
//     the vault holds the times the caller was shown. A file's content,
//     queued or committed, keeps its last write's modification time and
//     the change time last shown (vault.Tx.AtTimes): a close or a commit
//     moves no time. A file created and closed with nothing written
//     commits its create at close.
//   - The committed content of small files (up to 1 MiB, 64 MiB in all,
//     least recently used out) stays in memory after a read or a commit.
//     From the second file of a directory read from the vault, one query
//     reads the next small files of the directory with it (readAhead,
//     vault.Vault.ReadSmall), kept only where the vault's inode, size and
//     times are the ones the tree shows.
//   - A queued hard link of a file with one name, whose old name is
//     removed before the link is committed (git's link and unlink of
//     each object), is committed as a rename in the same directory that
//     sets the change time (renameQueued): the same result, without the
//     vault's hidden directory.
//
// # Coherence
//
// Every transaction on a vault, whichever process makes it, takes the
// next number of the vault's change sequence and stamps its audit events
// with it (vault.LogPos, vault.Log). The tree polls that position every
// Options.Poll (200 ms; one indexed row) and, when another writer moved
// it, reads the events since, re-reads the cached directories they touch
// (or every cached directory after a restore, an import or too many
// events), updates the entries that differ, reads again the link count of
// a hard-linked file that lost a name, and tells Options.Kernel what to
// forget (Kernel.Forget, Kernel.Changed). Refresh catches up at once. The
// tree's own queued changes are committed before it re-reads, so they are
// neither lost nor undone, and its own commits are recognised by their
// sequence numbers and cost nothing. A file with buffered writes keeps
// them (they win when committed); an open file whose content changed
// elsewhere reads the new content; one removed elsewhere reads its
// cached content, if any, else EIO.
//
// # Invariants
//
//   - Changes made behind the tree's back are shown within Options.Poll.
//     Invalidate, which drops every cache and fails open Files with
//     ESTALE, remains for a vault replaced wholesale. The vault API sees
//     a change made through the tree once Sync returns (queued changes
//     within FlushDelay anyway, a file and its contents when the file is
//     closed, or within FlushDelay of the close with QueueCloses).
//   - No call allocates by a size it names: holes in sparse files cost
//     nothing, a file cannot grow past the store's max_file_size (EFBIG),
//     and buffered writes are bounded: past MaxDirty in one file, or four
//     times that in all files, a file commits early, and an unlinked
//     file's writes (which go nowhere) fail with ENOSPC past MaxOrphan.
//   - Inode numbers are the vault's (vault.Entry.Ino): stable, never
//     reused within a vault. A queued create's number is reserved before
//     it is answered; numbers reserved and never used are skipped.
//   - A commit is all or nothing. One that fails, on a quota for
//     instance, drops that file's buffered changes: the vault and the
//     tree both keep the previous content (a new file stays, empty), and
//     Flush or Fsync reports the error. With QueueCloses a close commits
//     at once only in a vault with a quota; elsewhere a failure of the
//     queued content (a full disk) is logged and the tree resynchronises
//     (Invalidate), as for any queued change.
//   - An unlinked file stays readable through Files opened before (up to
//     MaxOrphan of committed content is kept in memory), but its writes
//     go nowhere.
//   - Owners are the caller's (Spec.Uid, Spec.Gid); an entry the vault
//     records no owner for shows as Options.Uid/Gid. Setgid directories
//     give their group (vault.Inherit). Permission checks are the
//     caller's (the kernel's default_permissions).
//   - Hard links are vault hard links (vault.Tx.Link): one inode, one
//     number, under several names, with its link count. An entry keeps
//     every name the tree has seen for it (Entry.links); its path, for
//     the vault, is any of them. Link and RENAME_EXCHANGE commit at once
//     (Link is queued with QueueCloses where nothing can refuse it).
//   - O_TMPFILE (Tmpfile): the unnamed file lives in memory (at most
//     MaxOrphan) until Link gives it a name, which creates it in the
//     vault, under the inode number reserved for it, with its content.
//
// # Backing files (passthrough)
//
// With Options.Backing, a read-only open of a clean file of MinBacked
// bytes or more with no other open Files gets a backing file
// (File.Backing): a copy of its committed content from a Backing, a cache
// shared by every tree of the store, one file per content key
// (vault.Tx.ContentKey), written on first use in the transaction that
// names the key, bounded, least recently used out. A FUSE mount hands it
// to the kernel, which reads it without asking. The kernel then ties every
// open of the inode to that file until the last backed File closes, so
// every open meanwhile gets it, write-opens included (decisions §32 and
// the passthrough section after it). To make that safe the backing file
// is checked out of the cache while open (renamed to a private name,
// passthrough.go): it is then the file's content. Writes through the
// kernel go to it directly; the tree's own reads, writes, truncations,
// fallocate and SEEK_DATA/SEEK_HOLE use it; a commit (flush, fsync,
// release, Sync) copies it into the vault when its stamp (size, mtime,
// ctime) moved, under the content key the vault then gives, and a
// catch-up that finds the file changed in the vault copies the new
// content into it (refillBacked), unless the mount has changes of its
// own (they win, as buffered writes do). At the last backed close it is
// checked back in under the key of what it holds, or removed if it was
// open for writing (a shared mapping may outlive the descriptors). Two
// mounts (two vaults, forks) reading the same content at once each
// check out their own copy: the second fills one from its vault.
//
// # Locks
//
// Lock order: follower.mu, then Tree.nsMu, then fileData.mu, then
// queue.tx, then queue.mu, then Tree.mu; Backing.mu is taken last and
// never held across a call out (a fill runs without it). A catch-up (follower.mu) holds
// nsMu exclusively while it re-reads and applies, and then the fileData
// of every file it may touch at once: nobody else holds two of those, as
// only holders of nsMu exclusively would. nsMu is held exclusively by
// create, remove and rename, and shared by everything else that resolves
// a vault path and then calls the vault, so a path stays right for the
// length of the call; the timer's commit of the queue needs no path and
// holds none. queue.tx is held across every vault write, which takes the
// whole queue, so none can run on a tree that misses a queued change;
// queue.mu only guards the queue, so changes are queued while one
// commits. Tree.mu guards the entries and is never held across a vault
// call. No lock is held across a call to Options.Kernel: the kernel may
// wait for a request in flight to finish, and that request may wait for
// the lock. Vault calls use the tree's own context, not the caller's.
package tree

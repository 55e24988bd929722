// Package mount serves a vault as a real directory through FUSE
// (go-fuse), so that git, go, cargo and make run in it unchanged. It owns
// the translation only: go-fuse nodes, FUSE attributes, open flags and
// kernel notifications. What a request means (lookups, the write
// buffers, the queue of changes answered before they are committed,
// following the vault's change log) is package mount/tree's, which knows
// nothing of the kernel; errno values come from there (tree.Errno maps
// vault errors with errors.Is/As: go-fuse's own fs.ToErrno does not
// unwrap, so a wrapped vault error would reach the kernel as ENOSYS). The
// vault knows nothing of either package.
//
// # What the kernel is asked to do
//
// A kernel round trip costs about as much as a small vault write, so the
// mount keeps requests few:
//   - The kernel caches names, attributes and misses for a minute
//     (Options), and directory listings and file pages until told
//     otherwise: it sees every change made through the mount, and the
//     tree reports changes made behind its back (tree.Kernel, implemented
//     by kernel.go: NotifyEntry and NotifyContent). The writeback cache
//     stays off: with it the kernel trusts its own file sizes, which a
//     checkpoint restore must be able to change.
//   - ACCESS (default_permissions), xattr requests (the vault has no
//     extended attributes), OPENDIR and RELEASEDIR (answered ENOSYS once,
//     see noOpendir; Linux 5.1 or later) are not sent at all; read-only
//     descriptors ask for no FLUSH. Without OPENDIR each READDIR is served
//     from a fresh listing, so a listing's offsets are inode numbers, not
//     positions (dirStream): a program that removes or adds entries while
//     it reads a directory (git clean, remove_dir_all) resumes where it
//     was.
//   - O_TRUNC arrives with OPEN (CAP_ATOMIC_O_TRUNC) and is buffered with
//     the writes that follow.
//   - With Options.Passthrough, a read-only open of a clean file of 1 MiB
//     or more answers with a backing file (backedHandle, go-fuse's
//     FilePassthroughFder; FOPEN_PASSTHROUGH): the kernel reads it
//     directly and sends no READ. While it is open, every open of the
//     file gets the same backing file, write-opens included, whose
//     writes the kernel makes to it directly (package tree: "Backing
//     files").
//
// # Invariants
//
//   - No single request can take the process down: a handler that
//     panics answers EIO (go-fuse recovers it), and the tree bounds what
//     a request may allocate (see package tree).
//   - Inode numbers are the vault's, so the generation is always 1.
//   - Owners, modes and permissions are POSIX's, checked by the kernel
//     (default_permissions); a create belongs to the calling process
//     (fuse.Caller). Options.AllowOther lets other users in.
//   - Fifos, sockets and device nodes are vault entries; the kernel
//     serves their opens (the mount is nodev and nosuid, as FUSE mounts
//     are by default, so a device node cannot be opened through it).
//   - The /dev/fuse descriptor is close-on-exec (closeFuseFDsOnExec): a
//     command that outlives a dead worker must not keep its mount alive.
//   - Not supported: extended attributes (EOPNOTSUPP). POSIX locks are
//     handled by the kernel locally.
//   - A process that serves mounts calls SpareProcs at its start: more
//     Ps (GOMAXPROCS) for go-fuse's readers blocked on /dev/fuse. Never
//     change GOMAXPROCS while a mount is served (procs.go).
//   - With Options.WakeHere, the first mount of a process sets the
//     fuse module parameter wake_here to Y where the kernel has it: the
//     server is woken on the CPU of the request (wakehere.go). It is the
//     machine's setting and is never put back.
//
// # Locks
//
// Mount.mu guards the file nodes known to the kernel (for the tree's
// Changed notes) and closed; it is never held across a tree call or a
// kernel notification. The tree's own locks are its business (package
// tree). Notifications the tree asks for while serving a request are
// sent from a goroutine of their own (kernel.Changed): the kernel may
// need that very request to finish first. Tree calls made for the kernel
// use the mount's own context, not the request's, which any signal to
// the calling process cancels.
package mount

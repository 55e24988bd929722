package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/vault"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Log keys.
const (
	keyErr = "err"
	keyDir = "dir"
)

const (
	// defaultTimeout is how long the kernel keeps names, attributes
	// and misses. Every change made through the mount reaches the
	// kernel with the request that makes it, and Invalidate drops the
	// kernel's copies after a change behind the mount's back, so the
	// timeout only bounds how long a change nobody reported stays
	// unseen. At 1 s, git status and find after a pause paid a LOOKUP
	// round trip per entry.
	defaultTimeout = time.Minute
	// maxWrite is the largest READ/WRITE request the kernel sends: the
	// fewer round trips the better, and 1 MiB is the kernel's limit.
	maxWrite = 1 << 20
	// unmountWait bounds how long Close waits for a lazily detached
	// mount to be released by the processes still using it.
	unmountWait = 10 * time.Second
)

// Options tune a Mount. The zero value is a read-write mount with the
// default cache timeouts.
type Options struct {
	// ReadOnly mounts the vault read-only: every change fails with EROFS.
	ReadOnly bool
	// AllowOther lets users other than the mounting one use the mount
	// (FUSE's allow_other: root, or user_allow_other in /etc/fuse.conf).
	// The kernel checks every caller against the entries' owners and
	// modes either way (default_permissions).
	AllowOther bool
	// Meta is recorded with every change made through the mount (Actor
	// defaults to "mount"). Its RequestID is ignored: a mount makes many
	// changes, and a request id would make all but the first replay it.
	Meta vault.Meta
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Debug logs every FUSE request and reply at debug level.
	Debug bool

	// EntryTimeout, AttrTimeout and NegativeTimeout are how long the
	// kernel may cache names, attributes and misses without asking
	// again. Zero means the default of 1 minute; a negative value disables
	// that cache. Changes made behind the mount's back are only seen
	// after Invalidate.
	EntryTimeout    time.Duration
	AttrTimeout     time.Duration
	NegativeTimeout time.Duration

	// QueueCloses makes the mount answer changes before they are in the
	// vault and commit them in bursts: removals, renames, creates,
	// attribute changes and hard links, and, in a vault without quotas,
	// a close (the last flush of a file, or its release) with the file's
	// buffered changes. A burst of small files (cp -r, git's objects,
	// rm -rf) then costs one transaction instead of one per file. The
	// vault API sees the changes within the queue's delay (20 ms) or at
	// Sync. A vault with a quota, which may refuse a commit, still
	// commits at close, so close(2) reports the refusal. For mounts
	// whose readers Sync first, as the worker does after each command.
	// Without it every change is in the vault when its call returns (a
	// file's create with its close), so another process's write, a
	// restore say, is ordered after it; only access times are queued.
	QueueCloses bool

	// Poll is how often the mount reads the vault's change log for
	// changes made behind its back (another process, an exec, a
	// restore), which it then shows. Zero means 200 ms; negative turns
	// following off (Refresh still catches up).
	Poll time.Duration

	// MaxDirty is how many bytes of one file's writes are buffered
	// before they are committed without waiting for close or fsync.
	// Zero means 64 MiB.
	MaxDirty int64
	// panicOn names an entry whose lookup panics: a fault the tests
	// inject (no request can make the mount panic for real) to check
	// that the serving process survives one.
	panicOn string
	// flushDelay replaces how long a queued change waits for a
	// transaction to ride on (zero: 20 ms). Tests that assert a create
	// rides on its file's first commit set it long, so a loaded machine
	// cannot fire the timer between the create and the close.
	flushDelay time.Duration

	// Passthrough, if not nil, lets the kernel read clean files
	// directly from backing files with their content (FUSE passthrough,
	// Linux 6.9 or later): a read-only open of a file of 1 MiB or more
	// with no buffered changes and no other open descriptors gets one
	// from this cache, shared by every mount of the store, and its reads
	// never reach the mount. The kernel then ties every open of that file
	// to that backing file until the last such descriptor closes; the
	// file is private to it meanwhile, so write-opens work and their
	// writes, made by the kernel to the backing file, are seen by every
	// descriptor and committed at close; a change made through the API or
	// another mount is copied into it (see tree.File.Backing). Nil (off)
	// here; avfs turns it on from config mount.passthrough (default true).
	Passthrough *tree.Backing

	// CacheBytes bounds the content of small files (up to 1 MiB each)
	// that the mount keeps in memory after reading or writing them, so
	// that reading them again costs no vault query. Zero means 64 MiB,
	// negative disables the cache.
	CacheBytes int64

	// OnSync, if not nil, runs after an fsync or fdatasync of a file or
	// a directory has committed its changes to the vault, and before the
	// kernel gets the reply: the fsync fails with EIO if it returns an
	// error. A fleet worker's mounts (mount.start) use it to have the
	// fleet hold what the fsync committed before it returns (docs
	// decisions §33); nil (a local mount, exec's) adds nothing to the
	// vault's own commit. It must not call back into the mount.
	OnSync func(ctx context.Context) error

	// WakeHere sets the fuse module parameter wake_here to Y before the
	// first mount of the process, on kernels that have it
	// (WakeServersHere): the kernel then wakes a mount's server on the
	// CPU of the request, about halving a request's round trip on a
	// small VM. It is the machine's setting and outlives the process.
	// Off here; avfs turns it on from config mount.wake_here (default
	// true).
	WakeHere bool
}

// Mount serves one vault at a directory through FUSE: it translates the
// kernel's requests into calls on a tree.Tree, which holds the vault's
// tree in memory, and its answers into replies. It is safe for
// concurrent use.
type Mount struct {
	t        *tree.Tree
	v        *vault.Vault
	dir      string
	log      *slog.Logger
	ro       bool
	uid, gid uint32
	server   *fuse.Server
	rootNode *dirNode

	// ctx carries every tree call made on the kernel's behalf. The
	// kernel's own request context is cancelled by any signal to the
	// caller (the Go runtime's SIGURG preemption included); a commit
	// aborted that way would fail close(2) for no reason.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards nodes and closed. It is never held across a tree call
	// or a kernel notification.
	mu sync.Mutex
	// nodes are the kernel's nodes of regular files, by inode number,
	// for the tree's notifications (Kernel.Changed).
	nodes  map[uint64]*fs.Inode
	closed bool
	// unread are the open handles whose prefilled content's read is not
	// recorded yet (prefill): Sync records them.
	unread map[*handle]struct{}

	panicOn string // Options.panicOn

	// onSync is Options.OnSync; it gets syncCtx, which Close cancels
	// first: an fsync racing the mount's end stops waiting for a hook
	// that may itself wait for Close's caller.
	onSync     func(ctx context.Context) error
	syncCtx    context.Context
	syncCancel context.CancelFunc

	served   chan struct{}  // closed when the server stops: unmounted
	dev      uint64         // the mount's device number, as stat shows it
	notifies sync.WaitGroup // kernel notifications sent in the background

	closeOnce sync.Once
	closeErr  error
}

// New mounts v at dir, which must be an existing directory, and serves it
// in the background until Close.
func New(ctx context.Context, v *vault.Vault, dir string, o Options) (*Mount, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("mount %s: %w", dir, syscall.ENOTDIR)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if o.WakeHere {
		WakeServersHere(logger)
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Mount{
		v: v, dir: dir, ro: o.ReadOnly,
		log: logger.With(keyDir, dir), uid: uint32(os.Getuid()), gid: uint32(os.Getgid()),
		ctx: mctx, cancel: cancel, nodes: map[uint64]*fs.Inode{}, unread: map[*handle]struct{}{}, panicOn: o.panicOn, onSync: o.OnSync,
	}
	m.syncCtx, m.syncCancel = context.WithCancel(mctx)
	m.rootNode = &dirNode{node{m: m, ino: tree.RootIno}}
	t, err := tree.New(ctx, v, tree.Options{
		ReadOnly: o.ReadOnly, Meta: o.Meta, Logger: m.log, QueueCloses: o.QueueCloses,
		Poll: o.Poll, MaxDirty: o.MaxDirty, CacheBytes: o.CacheBytes, FlushDelay: o.flushDelay,
		Kernel: (*kernel)(m), Uid: m.uid, Gid: m.gid, Backing: o.Passthrough,
	})
	if err != nil {
		m.syncCancel()
		cancel()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.t = t

	stdlog := slog.NewLogLogger(m.log.Handler(), slog.LevelDebug)
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			AllowOther:        o.AllowOther,
			FsName:            "avfs:" + v.Namespace() + "/" + v.Name(),
			Name:              "avfs",
			// The kernel checks permissions against the attributes
			// it caches, so ACCESS requests never reach us (and chdir
			// in a child being forked cannot deadlock on one).
			Options:  []string{"default_permissions"},
			MaxWrite: maxWrite,
			// The vault keeps no extended attributes. ENOSYS makes the
			// kernel stop asking, instead of sending a GETXATTR
			// (security.capability) before every write.
			DisableXAttrs:        true,
			EnableSymlinkCaching: true,
			// The mount invalidates the page cache itself (Invalidate,
			// failed commits); otherwise the mtime that a commit sets
			// would throw away pages the kernel holds correctly.
			ExplicitDataCacheControl: true,
			// O_TRUNC arrives with OPEN instead of as a separate
			// SETATTR, so it is buffered with the writes that follow:
			// a write that fails its quota leaves the old content.
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
			// Every READ is answered from memory (fuse.ReadResultData):
			// go-fuse's splice path would take a pipe, grow it and
			// write the reply's header into it before finding out it
			// has no file to splice from, and then write the reply
			// anyway, four system calls wasted per READ.
			DisableSplice: true,
			Debug:         o.Debug,
			Logger:        stdlog,
			PanicHandler: func(p any) fuse.Status {
				m.log.Error("panic in FUSE handler", keyErr, p)
				return fuse.EIO
			},
		},
		EntryTimeout:    timeout(o.EntryTimeout),
		AttrTimeout:     timeout(o.AttrTimeout),
		NegativeTimeout: timeout(o.NegativeTimeout),
		NullPermissions: true,
		UID:             m.uid,
		GID:             m.gid,
		RootStableAttr:  &fs.StableAttr{Ino: tree.RootIno, Gen: 1},
		Logger:          stdlog,
	}
	if o.ReadOnly {
		opts.DirectMountFlags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV
	}
	syscall.ForkLock.RLock()
	server, err := fuse.NewServer(noOpendir{fs.NewNodeFS(m.rootNode, opts)}, dir, &opts.MountOptions)
	if err == nil {
		closeFuseFDsOnExec()
	}
	syscall.ForkLock.RUnlock()
	if err == nil {
		go server.Serve()
		err = server.WaitMount()
	}
	if err != nil {
		t.Close()
		cancel()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.server = server
	var mst syscall.Stat_t
	if err := syscall.Stat(dir, &mst); err == nil {
		m.dev = mst.Dev
	}
	m.served = make(chan struct{})
	go func() {
		server.Wait()
		close(m.served)
	}()
	return m, nil
}

func timeout(d time.Duration) *time.Duration {
	switch {
	case d == 0:
		d = defaultTimeout
	case d < 0:
		d = 0
	}
	return &d
}

// Dir is the mount point.
func (m *Mount) Dir() string { return m.dir }

// Sync commits every buffered change to the vault now: queued removals
// and renames, then each file's writes in one transaction. A file whose
// commit fails keeps its previous content in the vault and loses the
// buffered changes; the errors are joined. Reads of content the kernel
// got with an open (prefill) that is still open are recorded first (their
// access times). Call Sync before changing the vault behind the mount's
// back.
func (m *Mount) Sync(ctx context.Context) error {
	m.mu.Lock()
	unread := make([]*handle, 0, len(m.unread))
	for h := range m.unread {
		unread = append(unread, h)
	}
	m.mu.Unlock()
	for _, h := range unread {
		m.readDone(h)
	}
	if err := m.t.Sync(ctx); err != nil {
		return fmt.Errorf("sync %s: %w", m.dir, err)
	}
	return nil
}

// Refresh brings the mount up to date with the vault now, instead of at
// the next poll: a caller that just changed the vault behind the mount's
// back, or is about to run a command in it, calls it. It costs one query
// when nothing changed. Unlike Invalidate it keeps open descriptors and
// queued changes.
func (m *Mount) Refresh(ctx context.Context) error { return m.t.Refresh(ctx) }

// Invalidate forgets everything the mount and the kernel cached about the
// vault (names, attributes, listings and file content), after the vault
// was changed behind the mount's back, by a checkpoint restore for
// instance. Changes not yet synced are dropped, and descriptors opened
// before the call fail with ESTALE.
func (m *Mount) Invalidate() { m.t.Invalidate() }

// Close commits buffered writes, unmounts (lazily if the mount is busy)
// and waits for the server to stop.
func (m *Mount) Close() error {
	m.closeOnce.Do(func() {
		m.syncCancel()
		m.t.StopFollowing()
		serr := m.Sync(m.ctx)
		uerr := m.unmount()
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		// Requests served while a busy mount drained may have queued
		// changes after the Sync above.
		if err := m.t.Close(); err != nil {
			serr = errors.Join(serr, err)
		}
		m.notifies.Wait()
		m.cancel()
		m.closeErr = errors.Join(serr, uerr)
	})
	return m.closeErr
}

func (m *Mount) unmount() error {
	err := m.server.Unmount()
	if err == nil {
		return nil
	}
	// Busy: detach the mount now; the server finishes once the last
	// process using it lets go.
	if derr := syscall.Unmount(m.dir, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("unmount %s: %w", m.dir, errors.Join(err, derr))
	}
	m.log.Info("mount busy, detached lazily", keyErr, err)
	done := make(chan struct{})
	go func() {
		m.server.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(unmountWait):
		return fmt.Errorf("unmount %s: detached but still in use after %v", m.dir, unmountWait)
	}
}

// Wait blocks until the file system is unmounted, by Close or from
// outside (`avfs unmount`, umount(8)).
func (m *Mount) Wait() { <-m.served }

// Serving reports whether the mount still answers: false once it was
// unmounted, by Close or from outside, or its mount point went dead
// (ENOTCONN). A lazy unmount from outside (umount -l) is seen at once,
// by the directory's device number, before the server notices it lost
// its connection.
func (m *Mount) Serving() bool {
	select {
	case <-m.served:
		return false
	default:
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.dir, &st); err != nil {
		return !errors.Is(err, syscall.ENOTCONN)
	}
	return m.dev == 0 || st.Dev == m.dev
}

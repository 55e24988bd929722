package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/avfs/avfs/vault"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Log keys.
const (
	keyOp      = "op"
	keyPath    = "path"
	keyErr     = "err"
	keyDir     = "dir"
	keyChanges = "changes"
)

const (
	blockSize = 4096

	// defaultTimeout is how long the kernel keeps names, attributes
	// and misses. Every change made through the mount reaches the
	// kernel with the request that makes it, and Invalidate drops the
	// kernel's copies after a change behind the mount's back, so the
	// timeout only bounds how long a change nobody reported stays
	// unseen. At 1 s, git status and find after a pause paid a LOOKUP
	// round trip per entry.
	defaultTimeout  = time.Minute
	defaultMaxDirty = 64 << 20
	defaultCache    = 64 << 20
	// maxOrphan bounds the content kept in memory for a file that is
	// unlinked while open; a larger one reads as EIO afterwards.
	maxOrphan = 64 << 20
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

	// QueueCloses makes a close (the last flush of a file, or its
	// release) queue the file's buffered changes like a removal or a
	// rename, in a vault without quotas, instead of committing them
	// before close(2) returns: a burst of small files (cp -r, git's
	// objects) then costs one transaction instead of one per file. The
	// vault API sees the content within the queue's delay (5 ms) or at
	// Sync. A vault with a quota, which may refuse a commit, still
	// commits at close, so close(2) reports the refusal. For mounts
	// whose readers Sync first, as the worker does after each command.
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
	// transaction to ride on (zero: 5 ms). Tests that assert a create
	// rides on its file's first commit set it long, so a loaded machine
	// cannot fire the timer between the create and the close.
	flushDelay time.Duration

	// CacheBytes bounds the content of small files (up to 1 MiB each)
	// that the mount keeps in memory after reading or writing them, so
	// that reading them again costs no vault query. Zero means 64 MiB,
	// negative disables the cache.
	CacheBytes int64
}

// Mount serves one vault at a directory through FUSE. It is safe for
// concurrent use.
type Mount struct {
	v        *vault.Vault
	dir      string
	meta     vault.Meta
	log      *slog.Logger
	ro       bool
	maxDirty int64
	uid, gid uint32
	server   *fuse.Server
	rootNode *dirNode

	// ctx carries every vault call made on the kernel's behalf. The
	// kernel's own request context is cancelled by any signal to the
	// caller (the Go runtime's SIGURG preemption included); a commit
	// aborted that way would fail close(2) for no reason.
	ctx    context.Context
	cancel context.CancelFunc

	// nsMu orders path-based vault calls against changes of the tree:
	// create, remove and rename hold it exclusively, everything that
	// resolves a path and then calls the vault holds it shared.
	nsMu sync.RWMutex

	// mu guards the entry cache: every entry field, the maps below and
	// closed. It is never held across a vault call or a kernel notify.
	mu     sync.Mutex
	root   *entry
	metas  map[uint64]*entry // every entry the mount knows, by inode number
	dirty  map[*entry]struct{}
	cache  contentCache
	closed bool

	q queue // removals and renames not yet in the vault

	panicOn    string        // Options.panicOn
	flushDelay time.Duration // Options.flushDelay, or 5 ms

	maxFileSize atomic.Int64 // the vault's max_file_size_mb or the store's limit, in bytes
	buffered    atomic.Int64 // bytes of writes buffered in all files (fileData.dirtyBytes)
	maxFiles    atomic.Bool  // the vault has a max_files quota: creates commit at once
	noQuota     atomic.Bool  // Options.QueueCloses and the vault has no quota: closes queue their content
	queueCloses bool         // Options.QueueCloses

	served     chan struct{} // closed when the server stops: unmounted
	dev        uint64        // the mount's device number, as stat shows it
	fol        follower      // the vault's change log as the caches reflect it
	stopFollow chan struct{} // closed by Close: the poller stops
	followDone chan struct{} // closed when the poller has stopped

	notifies  sync.WaitGroup // kernel notifications sent in the background
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
	pos, err := v.LogPos(ctx)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	st, err := v.Stat(ctx, "/")
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	meta := o.Meta
	meta.RequestID = ""
	if meta.Actor == "" {
		meta.Actor = "mount"
	}
	maxDirty := o.MaxDirty
	if maxDirty <= 0 {
		maxDirty = defaultMaxDirty
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Mount{
		v: v, dir: dir, meta: meta, ro: o.ReadOnly, maxDirty: maxDirty,
		log: logger.With(keyDir, dir), uid: uint32(os.Getuid()), gid: uint32(os.Getgid()),
		ctx: mctx, cancel: cancel,
		metas: map[uint64]*entry{}, dirty: map[*entry]struct{}{}, panicOn: o.panicOn,
		flushDelay: o.flushDelay, queueCloses: o.QueueCloses && !o.ReadOnly,
	}
	if m.flushDelay <= 0 {
		m.flushDelay = defaultFlushDelay
	}
	switch {
	case o.CacheBytes == 0:
		m.cache.max = defaultCache
	case o.CacheBytes > 0:
		m.cache.max = o.CacheBytes
	}
	m.fol.pos = pos
	m.root = newEntry(st)
	m.metas[rootIno] = m.root
	if err := m.refreshQuota(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.rootNode = &dirNode{node{m: m, ino: rootIno}}

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
			Debug:             o.Debug,
			Logger:            stdlog,
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
		RootStableAttr:  &fs.StableAttr{Ino: rootIno, Gen: 1},
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
	m.stopFollow, m.followDone = make(chan struct{}), make(chan struct{})
	if every := o.Poll; every >= 0 {
		if every == 0 {
			every = defaultPoll
		}
		go m.follow(every, m.stopFollow, m.followDone)
	} else {
		close(m.followDone)
	}
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
// buffered changes; the errors are joined. Call Sync before changing the
// vault behind the mount's back.
func (m *Mount) Sync(ctx context.Context) error {
	m.nsMu.RLock()
	err := m.flushHeld(ctx)
	m.nsMu.RUnlock()
	if err != nil {
		return fmt.Errorf("sync %s: %w", m.dir, err)
	}
	m.mu.Lock()
	list := make([]*entry, 0, len(m.dirty))
	for e := range m.dirty {
		list = append(list, e)
	}
	m.mu.Unlock()
	var errs []error
	for _, e := range list {
		if err := m.commit(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Invalidate forgets everything the mount and the kernel cached about the
// vault (names, attributes, listings and file content), after the vault
// was changed behind the mount's back, by a checkpoint restore for
// instance. Changes not yet synced are dropped, and descriptors opened
// before the call fail with ESTALE.
func (m *Mount) Invalidate() {
	m.nsMu.Lock()
	m.dropQueue()
	m.mu.Lock()
	old := m.metas
	negative := map[uint64][]string{}
	var datas []*fileData
	for ino, e := range old {
		for name := range e.negative {
			negative[ino] = append(negative[ino], name)
		}
		e.children, e.negative = nil, nil
		if e.data != nil {
			datas = append(datas, e.data)
		}
	}
	m.root.stale = true
	m.metas = map[uint64]*entry{rootIno: m.root}
	m.dirty = map[*entry]struct{}{}
	m.cache = contentCache{max: m.cache.max}
	m.mu.Unlock()
	for _, d := range datas {
		d.mu.Lock()
		m.mu.Lock()
		d.dirty = false
		m.mu.Unlock()
		d.stale = true
		m.account(d, d.revert)
		d.mu.Unlock()
	}
	if err := m.refreshQuota(m.ctx); err != nil {
		m.log.Warn("read quota", keyErr, err)
	}
	m.nsMu.Unlock()

	// Notify outside every lock: the kernel may wait for requests in
	// flight, and those may wait for our locks.
	m.invalidateKernel(m.rootNode.EmbeddedInode(), negative)
}

// invalidateKernel drops the kernel's dentries, negative dentries,
// attributes and page caches for every node it knows below root.
func (m *Mount) invalidateKernel(root *fs.Inode, negative map[uint64][]string) {
	seen := map[*fs.Inode]bool{}
	var walk func(d *fs.Inode)
	walk = func(d *fs.Inode) {
		if seen[d] {
			return
		}
		seen[d] = true
		d.NotifyContent(0, 0)
		for _, name := range negative[d.StableAttr().Ino] {
			d.NotifyEntry(name)
		}
		for name, c := range d.Children() {
			d.NotifyEntry(name)
			if c.IsDir() {
				walk(c)
			} else if !seen[c] {
				seen[c] = true
				c.NotifyContent(0, 0)
			}
		}
	}
	walk(root)
}

// Close commits buffered writes, unmounts (lazily if the mount is busy)
// and waits for the server to stop.
func (m *Mount) Close() error {
	m.closeOnce.Do(func() {
		close(m.stopFollow)
		<-m.followDone
		serr := m.Sync(m.ctx)
		uerr := m.unmount()
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		// Requests served while a busy mount drained may have queued
		// changes after the Sync above.
		m.nsMu.RLock()
		if err := m.flushHeld(m.ctx); err != nil {
			serr = errors.Join(serr, err)
		}
		m.nsMu.RUnlock()
		m.q.mu.Lock()
		if m.q.timer != nil {
			m.q.timer.Stop()
		}
		m.q.mu.Unlock()
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

// errno maps err for the kernel, logging the errors that are not a
// caller's mistake.
func (m *Mount) errno(op, p string, err error) syscall.Errno {
	e := Errno(err)
	if e == syscall.EIO || e == syscall.EBUSY || e == syscall.ESTALE {
		m.log.Warn("vault call failed", keyOp, op, keyPath, p, keyErr, err)
	}
	return e
}

// notifyContent tells the kernel in the background to drop in's cached
// attributes and, for off >= 0, its cached content. It runs apart from
// the handler that asks for it: the kernel may need that very request to
// finish before it can process the notification.
func (m *Mount) notifyContent(in *fs.Inode, off, n int64) {
	if in == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.notifies.Add(1)
	go func() {
		defer m.notifies.Done()
		in.NotifyContent(off, n)
	}()
}

func (m *Mount) refreshQuota(ctx context.Context) error {
	q, _, err := m.v.Quota(ctx)
	if err != nil {
		return err
	}
	limit := m.v.MaxFileSize()
	if q.MaxFileSizeMB != nil {
		limit = min(limit, *q.MaxFileSizeMB<<20)
	}
	m.maxFileSize.Store(limit)
	m.maxFiles.Store(q.MaxFiles != nil)
	m.noQuota.Store(m.queueCloses && q.MaxFiles == nil && q.MaxSizeMB == nil && q.MaxFileSizeMB == nil)
	return nil
}

// checkFileSize fails with EFBIG, before anything is buffered, when a
// file would grow past the vault's max_file_size_mb, as the commit would.
// The cached limit is read again before refusing, in case it was raised.
func (m *Mount) checkFileSize(ctx context.Context, d *fileData, size int64) syscall.Errno {
	limit := m.maxFileSize.Load()
	if limit == 0 || size <= limit || size <= d.vsize {
		return 0
	}
	if err := m.refreshQuota(ctx); err != nil {
		return m.errno("quota", "/", err)
	}
	if limit = m.maxFileSize.Load(); limit == 0 || size <= limit {
		return 0
	}
	return syscall.EFBIG
}

// statfs reports the vault's quota as the file system's capacity; with no
// quota, a notional 1 TiB free and 2^32 inodes.
func (m *Mount) statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	m.nsMu.RLock()
	err := m.flushHeld(ctx)
	m.nsMu.RUnlock()
	if err != nil {
		return m.errno("statfs", "/", err)
	}
	q, u, err := m.v.Quota(ctx)
	if err != nil {
		return m.errno("statfs", "/", err)
	}
	// Sparse files count their holes: keep room beyond them.
	capacity := max(int64(1<<40), u.Bytes+1<<40)
	if q.MaxSizeMB != nil {
		capacity = *q.MaxSizeMB << 20
	}
	files := int64(1 << 32)
	if q.MaxFiles != nil {
		files = *q.MaxFiles
	}
	out.Bsize, out.Frsize, out.NameLen = blockSize, blockSize, vault.MaxNameLen
	out.Blocks = uint64(capacity / blockSize)
	used := uint64((u.Bytes + blockSize - 1) / blockSize)
	if used < out.Blocks {
		out.Bfree = out.Blocks - used
	}
	out.Bavail = out.Bfree
	out.Files = uint64(files)
	if u.Files < files {
		out.Ffree = uint64(files - u.Files)
	}
	return 0
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

package tree

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/avfs/avfs/vault"
)

// Log keys.
const (
	keyOp      = "op"
	keyPath    = "path"
	keyErr     = "err"
	keyChanges = "changes"
)

const (
	// BlockSize is the block size the tree reports (statfs, st_blksize).
	BlockSize = 4096

	defaultMaxDirty = 64 << 20
	defaultCache    = 64 << 20
	// MaxOrphan bounds the content kept in memory for a file that is
	// unlinked while open; a larger one reads as EIO afterwards.
	MaxOrphan = 64 << 20
)

// Options tune a Tree. The zero value is a read-write tree with the
// defaults.
type Options struct {
	// ReadOnly refuses every change with EROFS.
	ReadOnly bool
	// Meta is recorded with every change (Actor defaults to "mount").
	// Its RequestID is ignored: a tree makes many changes, and a request
	// id would make all but the first replay it.
	Meta vault.Meta
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// QueueCloses: see mount.Options.QueueCloses.
	QueueCloses bool
	// Poll is how often the tree reads the vault's change log for changes
	// made behind its back. Zero means 200 ms; negative turns following
	// off (Refresh still catches up).
	Poll time.Duration
	// MaxDirty is how many bytes of one file's writes are buffered
	// before they are committed without waiting for close or fsync.
	// Zero means 64 MiB.
	MaxDirty int64
	// CacheBytes bounds the content of small files kept in memory. Zero
	// means 64 MiB, negative disables the cache.
	CacheBytes int64
	// FlushDelay is how long a queued change waits for a transaction to
	// ride on (zero: 20 ms).
	FlushDelay time.Duration
	// Kernel is told what it must forget; nil for a tree nobody caches.
	Kernel Kernel
	// Backing, if not nil, gives read-only opens of clean files a
	// backing file with their content (File.Backing), for FUSE
	// passthrough.
	Backing *Backing
	// Uid and Gid own the entries the vault records no owner for (the
	// mounting user); zero values mean the process's.
	Uid, Gid uint32
}

// Kernel is whatever caches the tree's answers (the kernel, through the
// mount) and must be told when they change. Its methods are called with
// no tree lock held, and must not wait for a request in flight to finish
// (the kernel may need that request to finish first): the mount sends
// them in the background.
type Kernel interface {
	// Changed drops the cached attributes of inode ino and, for off >=
	// 0, its cached pages from off, n bytes (0: to the end).
	Changed(ino uint64, off, n int64)
	// Forget drops what notes name, found by path: another writer
	// changed the vault there.
	Forget(notes []Note)
	// Reset drops everything cached (Invalidate). negative holds the
	// names each directory, by inode number, answered ENOENT for, which
	// may be cached as misses.
	Reset(negative map[uint64][]string)
}

// Note is something a cache of the tree must forget.
type Note struct {
	Path string // the node, or with Name the directory holding Name
	Name string // drop the name's dentry
	Data bool   // drop the node's pages too, not only its attributes
}

// nopKernel caches nothing.
type nopKernel struct{}

func (nopKernel) Changed(uint64, int64, int64) {}
func (nopKernel) Forget([]Note)                {}
func (nopKernel) Reset(map[uint64][]string)    {}

// Tree is one vault's tree as a file system shows it: entries in memory,
// per-file write buffers and a queue of changes answered before they are
// committed. It is safe for concurrent use.
type Tree struct {
	v        *vault.Vault
	meta     vault.Meta
	log      *slog.Logger
	ro       bool
	maxDirty int64
	uid, gid uint32
	kernel   Kernel
	backing  *Backing // Options.Backing
	refills  []*Entry // backed files a catch-up found changed (guarded by mu)

	// ctx carries every vault call made on a caller's behalf: a commit
	// aborted by a signal to the calling process would fail close(2)
	// for no reason.
	ctx    context.Context
	cancel context.CancelFunc

	// nsMu orders path-based vault calls against changes of the tree:
	// create, remove and rename hold it exclusively, everything that
	// resolves a path and then calls the vault holds it shared.
	nsMu sync.RWMutex

	// mu guards the entry cache: every entry field, the maps below and
	// closed. It is never held across a vault call or a kernel notify.
	mu     sync.Mutex
	root   *Entry
	metas  map[uint64]*Entry // every entry the tree knows, by inode number
	dirty  map[*Entry]struct{}
	cache  contentCache
	closed bool

	q queue // removals and renames not yet in the vault

	flushDelay time.Duration // Options.FlushDelay, or 20 ms

	maxFileSize atomic.Int64 // the vault's max_file_size_mb or the store's limit, in bytes
	buffered    atomic.Int64 // bytes of writes buffered in all files (fileData.dirtyBytes)
	maxFiles    atomic.Bool  // the vault has a max_files quota: creates commit at once
	noQuota     atomic.Bool  // Options.QueueCloses and the vault has no quota: closes queue their content
	queueCloses bool         // Options.QueueCloses

	fol        follower      // the vault's change log as the caches reflect it
	stopFollow chan struct{} // closed by Close: the poller stops
	followDone chan struct{} // closed when the poller has stopped

	resyncs   sync.WaitGroup // Invalidates run in the background (resync)
	closeOnce sync.Once
	closeErr  error
}

// New loads v's root and starts following v's change log.
func New(ctx context.Context, v *vault.Vault, o Options) (*Tree, error) {
	pos, err := v.LogPos(ctx)
	if err != nil {
		return nil, err
	}
	st, err := v.Stat(ctx, "/")
	if err != nil {
		return nil, err
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
	uid, gid := o.Uid, o.Gid
	if uid == 0 && gid == 0 {
		uid, gid = uint32(os.Getuid()), uint32(os.Getgid())
	}
	kernel := o.Kernel
	if kernel == nil {
		kernel = nopKernel{}
	}
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &Tree{
		v: v, meta: meta, ro: o.ReadOnly, maxDirty: maxDirty,
		log: logger, uid: uid, gid: gid, kernel: kernel, backing: o.Backing,
		ctx: tctx, cancel: cancel,
		metas: map[uint64]*Entry{}, dirty: map[*Entry]struct{}{},
		flushDelay: o.FlushDelay, queueCloses: o.QueueCloses && !o.ReadOnly,
	}
	if t.flushDelay <= 0 {
		t.flushDelay = defaultFlushDelay
	}
	switch {
	case o.CacheBytes == 0:
		t.cache.max = defaultCache
	case o.CacheBytes > 0:
		t.cache.max = o.CacheBytes
	}
	t.fol.pos = pos
	t.root = newEntry(st)
	t.metas[RootIno] = t.root
	if err := t.refreshQuota(ctx); err != nil {
		cancel()
		return nil, err
	}
	t.stopFollow, t.followDone = make(chan struct{}), make(chan struct{})
	if every := o.Poll; every >= 0 {
		if every == 0 {
			every = defaultPoll
		}
		go t.follow(every, t.stopFollow, t.followDone)
	} else {
		close(t.followDone)
	}
	return t, nil
}

// Vault is the vault the tree shows.
func (t *Tree) Vault() *vault.Vault { return t.v }

// Sync commits every buffered change to the vault now: queued changes,
// then each file's writes in one transaction. A file whose commit fails
// keeps its previous content in the vault and loses the buffered
// changes; the errors are joined.
func (t *Tree) Sync(ctx context.Context) error {
	t.nsMu.RLock()
	err := t.flushHeld(ctx)
	t.nsMu.RUnlock()
	if err != nil {
		return err
	}
	t.mu.Lock()
	list := make([]*Entry, 0, len(t.dirty))
	for e := range t.dirty {
		list = append(list, e)
	}
	t.mu.Unlock()
	var errs []error
	for _, e := range list {
		if err := t.commit(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	// A RELEASE that ran meanwhile may have queued a file's content
	// (QueuesCloses: the kernel sends no FLUSH, and RELEASE does not
	// wait for close(2)); it was dirty when listed, so it is either
	// committed above or in the queue now.
	t.nsMu.RLock()
	err = t.flushHeld(ctx)
	t.nsMu.RUnlock()
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Invalidate forgets everything the tree and the kernel hold of the vault
// (entries, listings, file content), after the vault was replaced behind
// its back. Changes not yet synced are dropped, and files opened before
// fail with ESTALE.
func (t *Tree) Invalidate() {
	negative := t.invalidate()
	// Outside every lock: the kernel may wait for requests in flight,
	// and those may wait for our locks.
	t.kernel.Reset(negative)
}

func (t *Tree) invalidate() (negative map[uint64][]string) {
	t.nsMu.Lock()
	defer t.nsMu.Unlock()
	t.dropQueue()
	t.mu.Lock()
	old := t.metas
	negative = map[uint64][]string{}
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
	t.root.stale = true
	t.metas = map[uint64]*Entry{RootIno: t.root}
	t.dirty = map[*Entry]struct{}{}
	t.cache = contentCache{max: t.cache.max}
	t.mu.Unlock()
	for _, d := range datas {
		d.mu.Lock()
		t.mu.Lock()
		d.dirty = false
		t.mu.Unlock()
		d.stale = true
		t.account(d, d.revert)
		d.mu.Unlock()
	}
	if err := t.refreshQuota(t.ctx); err != nil {
		t.log.Warn("read quota", keyErr, err)
	}
	return negative
}

// WaitResyncs waits for the resynchronisations started so far (a
// commit the vault refused drops every cache, in the background) to
// finish: files opened after it returns are not caught by them.
func (t *Tree) WaitResyncs() { t.resyncs.Wait() }

// StopFollowing stops reading the change log; Close does it too. The
// mount stops following before it unmounts, so that no catch-up runs
// against a kernel that is going away.
func (t *Tree) StopFollowing() {
	select {
	case <-t.stopFollow:
	default:
		close(t.stopFollow)
	}
	<-t.followDone
}

// Close stops following, commits what is buffered and queued, and
// reports the errors of those commits. The tree must not be used after.
func (t *Tree) Close() error {
	t.closeOnce.Do(func() {
		t.StopFollowing()
		err := t.Sync(t.ctx)
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		t.q.mu.Lock()
		if t.q.timer != nil {
			t.q.timer.Stop()
		}
		t.q.mu.Unlock()
		t.WaitResyncs()
		t.cancel()
		t.closeErr = err
	})
	return t.closeErr
}

// errno maps err, logging the errors that are not a caller's mistake.
func (t *Tree) errno(op, p string, err error) syscall.Errno {
	e := Errno(err)
	if e == syscall.EIO || e == syscall.EBUSY || e == syscall.ESTALE {
		t.log.Warn("vault call failed", keyOp, op, keyPath, p, keyErr, err)
	}
	return e
}

func (t *Tree) refreshQuota(ctx context.Context) error {
	q, _, err := t.v.Quota(ctx)
	if err != nil {
		return err
	}
	limit := t.v.MaxFileSize()
	if q.MaxFileSizeMB != nil {
		limit = min(limit, *q.MaxFileSizeMB<<20)
	}
	t.maxFileSize.Store(limit)
	t.maxFiles.Store(q.MaxFiles != nil)
	t.noQuota.Store(t.queueCloses && q.MaxFiles == nil && q.MaxSizeMB == nil && q.MaxFileSizeMB == nil)
	return nil
}

// checkFileSize fails with EFBIG, before anything is buffered, when a
// file would grow past the vault's max_file_size_mb, as the commit would.
// The cached limit is read again before refusing, in case it was raised.
func (t *Tree) checkFileSize(ctx context.Context, d *fileData, size int64) syscall.Errno {
	limit := t.maxFileSize.Load()
	if limit == 0 || size <= limit || size <= d.vsize {
		return 0
	}
	if err := t.refreshQuota(ctx); err != nil {
		return t.errno("quota", "/", err)
	}
	if limit = t.maxFileSize.Load(); limit == 0 || size <= limit {
		return 0
	}
	return syscall.EFBIG
}

// Statfs is what statfs(2) shows: the vault's quota as capacity.
type Statfs struct {
	Blocks, Bfree uint64 // of BlockSize bytes
	Files, Ffree  uint64
}

// Statfs reports the vault's quota as the file system's capacity; with
// no quota, a notional 1 TiB free and 2^32 inodes.
func (t *Tree) Statfs(ctx context.Context) (Statfs, syscall.Errno) {
	var out Statfs
	t.nsMu.RLock()
	err := t.flushHeld(ctx)
	t.nsMu.RUnlock()
	if err != nil {
		return out, t.errno("statfs", "/", err)
	}
	q, u, err := t.v.Quota(ctx)
	if err != nil {
		return out, t.errno("statfs", "/", err)
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
	out.Blocks = uint64(capacity / BlockSize)
	used := uint64((u.Bytes + BlockSize - 1) / BlockSize)
	if used < out.Blocks {
		out.Bfree = out.Blocks - used
	}
	out.Files = uint64(files)
	if u.Files < files {
		out.Ffree = uint64(files - u.Files)
	}
	return out, 0
}

// Buffered is how many bytes of writes all files hold, not yet committed.
func (t *Tree) Buffered() int64 { return t.buffered.Load() }

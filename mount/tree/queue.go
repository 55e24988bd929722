package tree

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/avfs/avfs/vault"
)

// defaultFlushDelay is how long a queued change may wait for a
// transaction to ride on before one is made for it alone. Each commit
// rewrites the pages its changes share (the directories', the index's),
// so fewer, larger bursts cost less: git init + add + commit of 2,000
// files made 725 transactions at 5 ms and 224 at 20 ms, with 16% less
// CPU (BenchmarkGit). Nothing waits on it but another reader of the
// vault, which the tree's own reads, Sync and fsync never make wait.
const defaultFlushDelay = 20 * time.Millisecond

// change is a create, removal, rename, chmod/utimens or a closed file's
// content (see Mount.commitLater) that was answered
// at once, after the mount checked it against its copy of the tree, and
// reaches the vault with the next transaction. None of them can break a
// quota (creates are queued only when the vault has no max_files), so
// none can fail there if the check passed. rm -rf, git's rename of each
// object into place and cargo's touching of fingerprints thus cost one
// transaction per burst instead of one per file, and a new file's create
// rides on the commit of its content when it is closed.
type change struct {
	op        changeOp
	from, to  string // to: the new path of a rename
	rmdir     bool
	noReplace bool
	mode      *iofs.FileMode // of a create
	attrs     vault.Attrs    // of a setattr
	// at is when the mount answered the change, the time the kernel
	// was shown for the entries it touched; the vault records the same.
	// A close's content (opContent), or a create made with it, records
	// modified, when its last write was answered (vault.Tx.AtTimes).
	at, modified time.Time
	// A create: the kind, and the inode number already given to the
	// kernel, reserved in the vault (Mount.inos); e is the mount's entry.
	kind     vault.Kind
	uid, gid uint32 // the creator
	ino      uint64
	e        *Entry
	// data is a new file's first content, closed before its create was
	// committed: the create makes the file with it.
	data []byte
	// content is what a close left to commit (opContent): a snapshot of
	// the file's buffered changes, no longer shared with its fileData.
	content *fileData
	// single marks a link of a file that had no other name, which a
	// removal of that name can turn into a rename (renameQueued); ctime
	// a rename that sets the moved entry's change time, as that pair
	// does (vault.RenameOptions.Ctime).
	single, ctime bool
}

type changeOp uint8

const (
	opRemove changeOp = iota
	opRename
	opSetattr
	opCreate
	opContent
	opLink // a hard link: from the existing name, to the new one
)

func (c change) String() string {
	return [...]string{"remove", "rename", "setattr", "create", "write", "link"}[c.op] + " " + c.from
}

func (c change) apply(tx *vault.Tx) error {
	switch {
	case c.at.IsZero():
		return c.applyNow(tx)
	case !c.modified.IsZero():
		return tx.AtTimes(c.at, c.modified, func() error { return c.applyNow(tx) })
	}
	return tx.AtTime(c.at, func() error { return c.applyNow(tx) })
}

// takesContent reports whether a create may be made with the file's
// first content, the file then getting the content's times. Not one
// with mode 0: the vault reads that as its default, and createIn sets
// it again after the create, which would give the file the create's
// change time.
func (c change) takesContent() bool { return c.mode == nil || *c.mode != 0 }

// applyWith applies a create of a file with its first content, last
// written at modified.
func (c change) applyWith(tx *vault.Tx, data []byte, modified time.Time) error {
	return tx.AtTimes(c.at, modified, func() error {
		return c.create(tx, data)
	})
}

// create applies a create, of a file with content data.
func (c change) create(tx *vault.Tx, data []byte) error {
	return tx.AsOwner(c.uid, c.gid, func() error {
		return tx.CreateWithIno(c.ino, func() error { return createIn(tx, c.from, newSpec{kind: c.kind}, *c.mode, data) })
	})
}

func (c change) applyNow(tx *vault.Tx) error {
	switch c.op {
	case opRename:
		return tx.Rename(c.from, c.to, vault.RenameOptions{NoReplace: c.noReplace, Ctime: c.ctime})
	case opSetattr:
		_, err := tx.SetAttrs(c.from, c.attrs)
		return err
	case opCreate:
		return c.create(tx, c.data)
	case opContent:
		return c.content.apply(tx, c.from)
	case opLink:
		return tx.Link(c.from, c.to)
	}
	return tx.Remove(c.from, vault.RemoveOptions{DirOnly: c.rmdir, FileOnly: !c.rmdir})
}

// inoBlock is how many inode numbers the mount reserves at a time for
// the creates it queues; a new block is reserved in whatever transaction
// runs once fewer than inoLow are left.
const (
	inoBlock = 1024
	inoLow   = 256
)

// inoPool is a run of reserved inode numbers, [next, end).
type inoPool struct{ next, end uint64 }

// queue holds the changes not yet in the vault, in order. tx is held
// across every vault write transaction, which takes all the changes queued
// when it starts, so that no transaction can run on a tree that misses a
// queued change. mu guards the fields below it and is held only briefly:
// changes are queued while a transaction commits earlier ones (rm -rf
// goes on while its last burst of removals is committed).
type queue struct {
	tx    sync.Mutex
	mu    sync.Mutex
	ops   []change
	timer *time.Timer
	inos  inoPool // reserved for queued creates
}

// queuedError marks a failure of the queued changes rather than of the
// transaction's own work.
type queuedError struct{ err error }

func (e *queuedError) Error() string { return "queued changes: " + e.err.Error() }
func (e *queuedError) Unwrap() error { return e.err }

// enqueue adds op, to be committed with the next transaction or after
// t.flushDelay. Caller holds t.nsMu exclusively.
func (t *Tree) enqueue(op change) {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	t.q.ops = append(t.q.ops, op)
	if t.q.timer == nil {
		t.q.timer = time.AfterFunc(t.flushDelay, t.flushLater)
	}
}

// names reports whether c names path p or a directory above it.
func (c change) names(p string) bool {
	under := func(q string) bool {
		return q != "" && (q == p || strings.HasPrefix(p, q) && (q == "/" || p[len(q)] == '/'))
	}
	return under(c.from) || under(c.to)
}

// renameQueued turns a queued hard link of a file that had no other
// name, from p to another name in the same directory, into a rename of p
// to that name, now that p is removed before the link was committed.
// git puts each object in place with link(2) and then unlink(2) of its
// temporary name; the vault makes a rename (a name moved) for a fraction
// of a link and an unlink (the inode moved into the hidden directory and
// back out, decisions §29), and the result is the same: one name, the
// link count, the times (vault.RenameOptions.Ctime). Nothing queued
// after the link may name either path; the rename is queued last, where
// the removal would have been. It reports whether it did so (the caller
// then queues no removal). Caller holds t.nsMu exclusively.
func (t *Tree) renameQueued(p string, at time.Time) bool {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	ops := t.q.ops
	// Most removals (rm -rf) find no link queued: say so without
	// comparing every queued path with p, which made a burst of n
	// removals cost n² comparisons.
	linked := false
	for i := range ops {
		if ops[i].op == opLink && ops[i].single {
			linked = true
			break
		}
	}
	if !linked {
		return false
	}
	for i := len(ops) - 1; i >= 0; i-- {
		op := ops[i]
		if op.op == opLink && op.from == p && op.single && path.Dir(op.from) == path.Dir(op.to) {
			for _, later := range ops[i+1:] {
				if later.names(op.to) {
					return false
				}
			}
			rn := change{op: opRename, from: p, to: op.to, noReplace: true, ctime: true, at: at}
			t.q.ops = append(append(ops[:i:i], ops[i+1:]...), rn)
			return true
		}
		if op.names(p) {
			return false
		}
	}
	return false
}

// flushLater commits the queue from the timer. It holds no t.nsMu: the
// queued changes carry their paths, and the mount's tree may move on
// while they commit.
func (t *Tree) flushLater() {
	// Wait out a commit in flight first, with the timer still set: the
	// changes queued meanwhile start no timer of their own, and this
	// commit takes them all, instead of a commit each for the few that
	// each timer would find.
	t.q.tx.Lock()
	t.q.tx.Unlock()
	t.q.mu.Lock()
	t.q.timer = nil
	t.q.mu.Unlock()
	if err := t.flushHeld(t.ctx); err != nil {
		t.log.Warn("commit queued changes", keyErr, err)
	}
}

// flushHeld commits the queued changes, and waits for a commit of
// earlier ones in flight, before a vault read that must see them. A
// caller that then reads by path holds t.nsMu.
func (t *Tree) flushHeld(ctx context.Context) error {
	t.q.mu.Lock()
	n := len(t.q.ops)
	t.q.mu.Unlock()
	if n == 0 {
		// Nothing queued, but the timer's commit may hold changes
		// the mount has already answered: wait for it. If it failed,
		// it put them back: commit them here, and report the error.
		t.q.tx.Lock()
		t.q.mu.Lock()
		n = len(t.q.ops)
		t.q.mu.Unlock()
		t.q.tx.Unlock()
		if n == 0 {
			return nil
		}
	}
	return t.update(ctx, func(*vault.Tx) error { return nil })
}

// flushForRead is flushHeld for a read of file content or of a
// directory's first listing, which queued access times do not change: a queue holding nothing else stays queued.
// Otherwise a cold read of many files would commit the previous file's
// atime before each read, a write transaction per file. A commit in
// flight is still waited for: it may hold a rename the read must see.
func (t *Tree) flushForRead(ctx context.Context) error {
	t.q.tx.Lock()
	t.q.mu.Lock()
	only := onlyAtimes(t.q.ops)
	t.q.mu.Unlock()
	t.q.tx.Unlock()
	if only {
		return nil
	}
	return t.flushHeld(ctx)
}

// onlyAtimes reports whether ops set access times and nothing else.
func onlyAtimes(ops []change) bool {
	for _, op := range ops {
		if op.op != opSetattr || op.attrs != (vault.Attrs{Atime: op.attrs.Atime, Accessed: true}) {
			return false
		}
	}
	return true
}

// dropQueue forgets the queued changes, for Invalidate: they were made
// against a tree the vault no longer has.
func (t *Tree) dropQueue() {
	t.q.tx.Lock()
	defer t.q.tx.Unlock()
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	if len(t.q.ops) > 0 {
		t.log.Warn("vault changed behind the mount before its queued changes were synced: dropped them", keyChanges, len(t.q.ops))
	}
	t.q.ops = nil
	if t.q.timer != nil {
		t.q.timer.Stop()
		t.q.timer = nil
	}
}

// update runs fn in one vault transaction, recorded with the mount's Meta,
// after the queued changes. If fn fails, the queued changes stay queued.
// If the vault refuses them, the mount's copy of the tree no longer
// matches the vault: the error is logged, the caches are dropped, and fn
// runs alone.
func (t *Tree) update(ctx context.Context, fn func(tx *vault.Tx) error) error {
	return t.updateFresh(ctx, fresh{}, func(tx *vault.Tx, _ time.Time) error { return fn(tx) })
}

// fresh is the whole first content of a new file: if the file's create
// is still queued, the transaction creates it with this content, one
// vault write instead of a create and a write that walk the path twice.
type fresh struct {
	e    *Entry
	data []byte
	// modified is when data was last written.
	modified time.Time
}

// freshError marks the failure of a create made with its content (a
// quota, say): the transaction is tried again the ordinary way, so that
// the error is the content's, and the create stays queued.
type freshError struct{ err error }

func (e *freshError) Error() string { return "create with content: " + e.err.Error() }
func (e *freshError) Unwrap() error { return e.err }

// timesSetAfterCreate reports whether ops set the mtime of e's file after
// queuing its create.
func timesSetAfterCreate(ops []change, e *Entry) bool {
	path := ""
	for _, op := range ops {
		switch {
		case op.op == opCreate && op.e == e:
			path = op.from
		case path != "" && op.op == opRename && op.from == path:
			path = op.to
		case path != "" && op.op == opSetattr && op.from == path && op.attrs.Mtime != nil:
			return true
		}
	}
	return false
}

// updateFresh is update, with f's create made with its content if it is
// among the queued changes. fn learns the time of that create, or zero if
// it did not happen that way (fn then writes the content itself).
func (t *Tree) updateFresh(ctx context.Context, f fresh, fn func(tx *vault.Tx, wrote time.Time) error) error {
	t.q.tx.Lock()
	defer t.q.tx.Unlock()
	t.q.mu.Lock()
	ops := t.q.ops
	t.q.ops = nil
	low := t.q.inos.end-t.q.inos.next < inoLow
	t.q.mu.Unlock()
	if f.e != nil && timesSetAfterCreate(ops, f.e) {
		// The content would be committed before the times set after the
		// create, and replace the mtime the write gave the file.
		f = fresh{}
	}
	var reserved inoPool
	fnFailed := false
	var err error
	var seq int64
	// The transaction's statements run without a cancellable context:
	// the SQLite driver starts a goroutine per statement to watch one
	// (5% of the mount's CPU in rm -rf, with the wake-ups it causes),
	// and nothing cancels a commit of the tree's (t.ctx ends only after
	// Close has committed everything).
	ctx = context.WithoutCancel(ctx)
	for {
		err = t.v.Update(ctx, t.meta, func(tx *vault.Tx) error {
			reserved, seq = inoPool{}, tx.Seq()
			var wrote time.Time
			for _, op := range ops {
				if f.e != nil && op.op == opCreate && op.e == f.e && op.takesContent() {
					if err := op.applyWith(tx, f.data, f.modified); err != nil {
						return &freshError{fmt.Errorf("%s: %w", op, err)}
					}
					wrote = op.at
					continue
				}
				if err := op.apply(tx); err != nil {
					return &queuedError{fmt.Errorf("%s: %w", op, err)}
				}
			}
			if err := fn(tx, wrote); err != nil {
				fnFailed = true
				return err
			}
			if low {
				first := tx.ReserveInos(inoBlock)
				reserved = inoPool{first, first + inoBlock}
			}
			return nil
		})
		var fe *freshError
		if f.e == nil || !errors.As(err, &fe) {
			break
		}
		f = fresh{}
	}
	var qe *queuedError
	switch {
	case err == nil:
		t.fol.mine(seq)
		t.createdLocked(ops)
		t.q.mu.Lock()
		if reserved.end != 0 {
			t.q.inos = reserved
		}
		if len(t.q.ops) == 0 && t.q.timer != nil {
			// Nothing left for the timer to commit.
			t.q.timer.Stop()
			t.q.timer = nil
		}
		t.q.mu.Unlock()
	case errors.As(err, &qe):
		t.log.Error("vault refused changes the mount had answered; resynchronising", keyErr, err)
		t.resync()
		err = t.v.Update(ctx, t.meta, func(tx *vault.Tx) error {
			seq = tx.Seq()
			return fn(tx, time.Time{})
		})
		if err == nil {
			t.fol.mine(seq)
		}
	case len(ops) > 0:
		t.q.mu.Lock()
		t.q.ops = append(ops, t.q.ops...)
		if fnFailed && t.q.timer == nil {
			// The queued changes are fine; only fn's work was
			// refused (a quota): commit them soon on their own.
			t.q.timer = time.AfterFunc(t.flushDelay, t.flushLater)
		}
		t.q.mu.Unlock()
	}
	return err
}

// createdLocked records that the creates among ops are in the vault.
// Caller holds t.q.tx.
func (t *Tree) createdLocked(ops []change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, op := range ops {
		if op.op == opCreate {
			op.e.queued = false
		}
	}
}

// takeIno hands out a reserved inode number for a queued create; ok is
// false when none is left (the create then commits at once, and its
// transaction reserves more). Caller holds t.nsMu exclusively.
func (t *Tree) takeIno() (ino uint64, ok bool) {
	t.q.mu.Lock()
	defer t.q.mu.Unlock()
	if t.q.inos.next >= t.q.inos.end {
		return 0, false
	}
	ino = t.q.inos.next
	t.q.inos.next++
	return ino, true
}

// resync drops every cache in the background: the caller holds locks that
// Invalidate needs.
func (t *Tree) resync() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.resyncs.Add(1)
	go func() {
		defer t.resyncs.Done()
		t.Invalidate()
	}()
}

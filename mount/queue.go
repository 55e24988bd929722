package mount

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"sync"
	"time"

	"github.com/avfs/avfs/vault"
)

// flushDelay is how long a queued change may wait for a
// transaction to ride on before one is made for it alone.
const flushDelay = 5 * time.Millisecond

// change is a removal, rename or chmod/utimens that was answered at
// once, after the mount checked it against its copy of the tree, and
// reaches the vault with the next transaction. None of them can break a
// quota, so none can fail there if the check passed. rm -rf, git's rename
// of each object into place and cargo's touching of fingerprints thus
// cost one transaction per burst instead of one per file.
type change struct {
	op        changeOp
	from, to  string // to: the new path of a rename
	rmdir     bool
	noReplace bool
	mode      *iofs.FileMode
	mtime     *time.Time
}

type changeOp uint8

const (
	opRemove changeOp = iota
	opRename
	opSetattr
)

func (c change) String() string {
	return [...]string{"remove", "rename", "setattr"}[c.op] + " " + c.from
}

func (c change) apply(tx *vault.Tx) error {
	switch c.op {
	case opRename:
		return tx.Rename(c.from, c.to, vault.RenameOptions{NoReplace: c.noReplace})
	case opSetattr:
		_, err := tx.SetAttr(c.from, c.mode, c.mtime)
		return err
	}
	return tx.Remove(c.from, vault.RemoveOptions{DirOnly: c.rmdir, FileOnly: !c.rmdir})
}

// queue holds the changes not yet in the vault, in order. Its
// mutex is also held across every vault write transaction, so that no
// transaction can run on a tree that misses a queued change.
type queue struct {
	mu    sync.Mutex
	ops   []change
	timer *time.Timer
}

// queuedError marks a failure of the queued changes rather than of the
// transaction's own work.
type queuedError struct{ err error }

func (e *queuedError) Error() string { return "queued changes: " + e.err.Error() }
func (e *queuedError) Unwrap() error { return e.err }

// enqueue adds op, to be committed with the next transaction or after
// flushDelay. Caller holds m.nsMu exclusively.
func (m *Mount) enqueue(op change) {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	m.q.ops = append(m.q.ops, op)
	if m.q.timer == nil {
		m.q.timer = time.AfterFunc(flushDelay, m.flushLater)
	}
}

func (m *Mount) flushLater() {
	m.q.mu.Lock()
	m.q.timer = nil
	m.q.mu.Unlock()
	m.nsMu.RLock()
	defer m.nsMu.RUnlock()
	if err := m.flushHeld(m.ctx); err != nil {
		m.log.Warn("commit queued changes", keyErr, err)
	}
}

// flushHeld commits the queued changes, before a vault read that must see
// them. Caller holds m.nsMu.
func (m *Mount) flushHeld(ctx context.Context) error {
	m.q.mu.Lock()
	n := len(m.q.ops)
	m.q.mu.Unlock()
	if n == 0 {
		return nil
	}
	return m.update(ctx, func(*vault.Tx) error { return nil })
}

// dropQueue forgets the queued changes, for Invalidate: they were made
// against a tree the vault no longer has.
func (m *Mount) dropQueue() {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	if len(m.q.ops) > 0 {
		m.log.Warn("vault changed behind the mount before its queued changes were synced: dropped them", keyChanges, len(m.q.ops))
	}
	m.q.ops = nil
	if m.q.timer != nil {
		m.q.timer.Stop()
		m.q.timer = nil
	}
}

// update runs fn in one vault transaction, recorded with the mount's Meta,
// after the queued changes. If fn fails, the queued changes stay queued.
// If the vault refuses them, the mount's copy of the tree no longer
// matches the vault: the error is logged, the caches are dropped, and fn
// runs alone.
func (m *Mount) update(ctx context.Context, fn func(tx *vault.Tx) error) error {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	ops := m.q.ops
	m.q.ops = nil
	err := m.v.Update(ctx, m.meta, func(tx *vault.Tx) error {
		for _, op := range ops {
			if err := op.apply(tx); err != nil {
				return &queuedError{fmt.Errorf("%s: %w", op, err)}
			}
		}
		return fn(tx)
	})
	var qe *queuedError
	switch {
	case errors.As(err, &qe):
		m.log.Error("vault refused changes the mount had answered; resynchronising", keyErr, err)
		m.resync()
		err = m.v.Update(ctx, m.meta, fn)
	case err != nil && len(ops) > 0:
		m.q.ops = append(ops, m.q.ops...)
	}
	return err
}

// resync drops every cache in the background: the caller holds locks that
// Invalidate needs.
func (m *Mount) resync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.notifies.Add(1)
	go func() {
		defer m.notifies.Done()
		m.Invalidate()
	}()
}

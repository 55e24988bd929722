package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/avfs/avfs/vault"
)

// An fsync through the worker's own mounts (mount.start) is an
// acknowledgement of durability, as an API reply is: in sync mode it
// returns only once the fleet holds what it committed (docs/decisions.md
// §33). The mount commits to the store, then calls mountSynced (node's
// SetMountSync, mount.Options.OnSync) before the kernel gets the reply:
// unless the change log already holds the store's position, it pushes a
// snapshot pinned to the log, under the vault's log lock and fenced as
// any other (a worker that lost the vault fails, and the fsync with it:
// EIO). A close without fsync is held by the catch-up loop (ahead.go)
// within about aheadEvery, as a disk holds a closed file's pages within
// its writeback delay.

// syncPoll is how often an fsync waiting for a vault's log lock looks
// whether the lock's holder has already held its commit.
const syncPoll = 2 * time.Millisecond

// mountSynced returns once the fleet holds what an fsync through a mount
// of ns/name committed to the store, in a vault replicated in sync mode
// (async and checkpoint modes leave it to the catch-up loop and the
// pushes). ctx ends when the mount starts closing: then it stops
// waiting for the log lock (mount.stop holds it while it closes the
// mount, and pushes its own snapshot before its reply).
func (l *changelog) mountSynced(ctx context.Context, ns, name string) error {
	k := vkey{ns, name}
	if !l.streamOn() || l.mode(ctx, k) != vault.ReplicationSync {
		return nil
	}
	work := context.WithoutCancel(ctx)
	if !l.taken(k) {
		// A failed append made this worker forget the vault (or it never
		// took it): take it again first, as a request would.
		if err := l.retake(work, k); err != nil {
			return fmt.Errorf("fsync of %s/%s: %w", ns, name, err)
		}
	}
	pos, err := l.st.Vault(ns, name).ChangeSeq(work)
	if err != nil {
		return fmt.Errorf("fsync of %s/%s: %w", ns, name, err)
	}
	m := l.lock(k)
	for !m.TryLock() {
		// A request of the vault is between its change and its append,
		// or a snapshot is being exported: either may hold this
		// commit when it is done.
		if l.holds(work, k, pos) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fsync of %s/%s: the mount is closing: %w", ns, name, ctx.Err())
		case <-time.After(syncPoll):
		}
	}
	defer m.Unlock()
	if l.holds(work, k, pos) {
		return nil
	}
	if !l.taken(k) {
		// Forgotten again while this waited (an append failed).
		return fmt.Errorf("fsync of %s/%s: %w", ns, name, errNotTaken)
	}
	if err := l.snapshot(context.WithValue(work, heldKey{}, k), k, "fsync"); err != nil {
		return fmt.Errorf("fsync of %s/%s: %w", ns, name, err)
	}
	return nil
}

// holds reports whether the log holds k's store at pos: this worker
// recorded its copy equal to the log at a position at or after pos.
func (l *changelog) holds(ctx context.Context, k vkey, pos vault.LogPos) bool {
	lp, ok := l.local(ctx, k)
	return ok && lp.pos.Vault == pos.Vault && lp.pos.Seq >= pos.Seq
}

// taken reports whether this worker holds k's log position: it took the
// vault's log over and no append failed since.
func (l *changelog) taken(k vkey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.last[k]
	return ok
}

// retake takes k's log over again, as a request's reconcile does, when
// this worker still owns k; errLostVault when another worker does. A
// vault lapses after a failed append (a NATS node electing leaders, a
// timeout): without this, writes through a mount of it, which make no
// request, would fail their fsync (and the catch-up loop would skip
// them) until some request came.
func (l *changelog) retake(ctx context.Context, k vkey) error {
	if l.s.owned == nil {
		return errNotTaken // not a fleet member (yet)
	}
	o, known, err := l.s.owned.Get(ctx, k.ns, k.vault)
	if err != nil {
		return err
	}
	if !known || o.Worker != l.s.id {
		l.mu.Lock()
		delete(l.lapsed, k)
		l.mu.Unlock()
		return errLostVault
	}
	if err := l.s.ho.reconcile(ctx, k, o.Epoch, ""); err != nil {
		return err
	}
	l.mu.Lock()
	_, ok := l.last[k]
	delete(l.lapsed, k) // taken, or not logged (any more) or deleted
	l.mu.Unlock()
	if !ok {
		return errNotTaken
	}
	return nil
}

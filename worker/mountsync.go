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
	l.mu.Lock()
	_, taken := l.last[k]
	l.mu.Unlock()
	if !taken {
		// Lost (another worker appended), or a failed append made this
		// worker forget it: only a request's reconcile can tell, and
		// until then nothing through the mount can be held.
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

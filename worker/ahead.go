package worker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/avfs/avfs/telemetry"
)

// Catching up with changes made outside the fleet's requests. A write
// through the worker's own FUSE mount (mount.start), a background run's
// effects while it runs, a local command on the same store: each commits
// to the store without a change log entry, so the copy gets ahead of the
// log. The next logged request of the vault notices and pushes a
// snapshot before its reply, but a vault may get none for a long time
// (an agent working only through its mount). So every aheadEvery the
// worker looks at the vaults whose log it took: one whose copy moved
// past the position it recorded, and which no request holds (its log
// lock is free), gets a snapshot pushed, which holds those changes in
// the fleet. The recovery point of such writes is therefore about
// aheadEvery plus the push, not "the next request"; an fsync through the
// mount holds them before it returns (mountsync.go).

// aheadEvery is how often the worker looks for copies ahead of the log.
const aheadEvery = time.Second

// catchUpLoop pushes snapshots of copies ahead of their log every every
// (0: aheadEvery; negative: never) until ctx ends.
func (l *changelog) catchUpLoop(ctx context.Context, every time.Duration) {
	if every < 0 {
		return
	}
	if every == 0 {
		every = aheadEvery
	}
	everyTick(ctx, every, func() { l.catchUp(ctx) })
}

// everyTick runs fn every d until ctx ends.
func everyTick(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// catchUp takes lapsed vaults again (retake), then pushes a snapshot of
// each vault this worker took whose copy is ahead of its recorded log
// position and whose log lock is free.
func (l *changelog) catchUp(ctx context.Context) {
	if !l.streamOn() {
		return
	}
	l.mu.Lock()
	lapsed := slices.Collect(maps.Keys(l.lapsed))
	l.mu.Unlock()
	for _, k := range lapsed {
		if ctx.Err() != nil {
			return
		}
		if err := l.retake(ctx, k); err != nil && !errors.Is(err, errLostVault) && !errors.Is(err, errNotTaken) {
			l.s.log.Warn("change log: take a lapsed vault again", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, telemetry.LogKeyErr, err)
		}
	}
	l.mu.Lock()
	taken := slices.Collect(maps.Keys(l.last))
	l.mu.Unlock()
	for _, k := range taken {
		if ctx.Err() != nil {
			return
		}
		lp, ok := l.local(ctx, k)
		if !ok || !l.logged(ctx, k) {
			continue
		}
		pos, err := l.st.Vault(k.ns, k.vault).ChangeSeq(ctx)
		if err != nil || pos == lp.pos {
			continue
		}
		m := l.lock(k)
		if !m.TryLock() {
			continue // a request is between its change and its append
		}
		err = l.snapshot(context.WithValue(ctx, heldKey{}, k), k, "ahead")
		m.Unlock()
		if err != nil {
			l.s.log.Warn("change log: snapshot of a copy ahead of the log", telemetry.LogKeyNamespace, k.ns, telemetry.LogKeyVault, k.vault, telemetry.LogKeyErr, err)
		}
	}
}

package tree

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/avfs/avfs/vault"
)

// Following the vault's change log. Whoever changes the vault (another
// process on the same store, a worker's exec, a restore, an import that
// replaces it) leaves its changes in the vault's change log
// (vault.LogPos, vault.Log) in the same transaction. The mount polls the
// log's position every Options.Poll; when someone else moved it, it reads
// the events since, re-reads the listings of the cached directories they
// name, updates its entries where they differ from the vault, and tells
// the kernel to drop what it cached of those: names (NotifyEntry),
// attributes and pages (NotifyContent). Open descriptors stay valid, and
// the mount's own queued changes are committed first, so they are neither
// lost nor undone.

const (
	// defaultPoll is how often the mount looks at the change log. One
	// indexed row per poll; a change made elsewhere shows within it.
	defaultPoll = 200 * time.Millisecond
	// maxFollow is how many changed paths one catch-up re-reads the
	// directories of; past that it re-reads every cached directory.
	maxFollow = 1000
	// logPage is how many events one read of the change log returns.
	logPage = 1000
)

// follower is the mount's position in the vault's change log.
type follower struct {
	mu  sync.Mutex   // held across a catch-up: one at a time
	pos vault.LogPos // what the caches reflect

	ownMu sync.Mutex
	own   map[int64]struct{} // change sequence numbers of the mount's own commits
}

// mine records that the mount committed change sequence number seq.
func (f *follower) mine(seq int64) {
	f.ownMu.Lock()
	defer f.ownMu.Unlock()
	if f.own == nil {
		f.own = map[int64]struct{}{}
	}
	f.own[seq] = struct{}{}
}

// isMine reports whether seq is one of the mount's own commits.
func (f *follower) isMine(seq int64) bool {
	f.ownMu.Lock()
	defer f.ownMu.Unlock()
	_, ok := f.own[seq]
	return ok
}

// forget drops the own sequence numbers up to seq, which a catch-up has
// passed.
func (f *follower) forget(seq int64) {
	f.ownMu.Lock()
	defer f.ownMu.Unlock()
	for s := range f.own {
		if s <= seq {
			delete(f.own, s)
		}
	}
}

// follow polls the change log until stop is closed.
func (t *Tree) follow(every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if err := t.catchUp(t.ctx); err != nil && !errors.Is(err, vault.ErrVaultNotFound) && t.ctx.Err() == nil {
			t.log.Warn("follow the vault's changes", keyErr, err)
		}
	}
}

// Refresh brings the mount up to date with the vault now, instead of at
// the next poll: a caller that just changed the vault behind the mount's
// back, or is about to run a command in it, calls it. It costs one query
// when nothing changed. Unlike Invalidate it keeps open descriptors and
// queued changes.
func (t *Tree) Refresh(ctx context.Context) error { return t.catchUp(ctx) }

// catchUp applies the changes other writers made since the last one.
func (t *Tree) catchUp(ctx context.Context) error {
	f := &t.fol
	f.mu.Lock()
	defer f.mu.Unlock()
	pos, err := t.v.LogPos(ctx)
	if err != nil {
		return err
	}
	if pos.Vault == f.pos.Vault && pos.Seq == f.pos.Seq {
		f.pos = pos
		return nil
	}
	full, quota := pos.Vault != f.pos.Vault, false
	var paths []string
	for after := f.pos.Last; !full && after < pos.Last; {
		es, err := t.v.Log(ctx, pos.Vault, after, logPage)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			after = e.ID
			if e.ID > pos.Last || f.isMine(e.Seq) {
				continue // after pos (the next catch-up's), or the mount's own
			}
			switch {
			case e.Action == "quota.set":
				quota = true
			case !changesTree(e.Action):
			case e.Path == "/":
				full = true
			default:
				paths = append(paths, e.Path)
				if e.To != "" {
					paths = append(paths, e.To)
				}
			}
		}
		full = full || len(paths) > maxFollow
	}
	if full || quota {
		if err := t.refreshQuota(ctx); err != nil {
			return err
		}
	}
	if full || len(paths) > 0 {
		t.nsMu.Lock()
		notes, err := t.reconcileHeld(ctx, paths, full)
		t.nsMu.Unlock()
		t.mu.Lock()
		refills := t.refills
		t.refills = nil
		t.mu.Unlock()
		for _, e := range refills {
			t.refillBacked(ctx, e)
		}
		t.notify(notes)
		if err != nil {
			return err // the next catch-up tries these events again
		}
	}
	f.forget(pos.Seq)
	f.pos = pos
	return nil
}

// changesTree reports whether an event of this action may have changed
// the tree; unknown actions are assumed to.
func changesTree(action string) bool {
	switch action {
	case "vault.fork", "vault.forked", "checkpoint.save", "checkpoint.delete", "quota.set",
		"checkpoint.prune", "vault.set":
		return false
	case "audit.clear":
		// It may have deleted events this mount had not read yet (one
		// that fell behind by more than vault.AuditGrace): its path, "/",
		// reconciles the whole tree.
		return true
	}
	return !strings.HasPrefix(action, "exec.") && !strings.HasPrefix(action, "approval.")
}

// listing is a directory as the vault has it now; gone when the vault
// no longer has that directory at its path.
type listing struct {
	self vault.Entry
	list []vault.Entry
	gone bool
}

// reconcileHeld re-reads the cached directories that paths lie in (every
// cached directory if full) and brings the entries in line with the
// vault. It returns what the kernel must forget. Caller holds t.nsMu
// exclusively: no change through the mount runs meanwhile.
func (t *Tree) reconcileHeld(ctx context.Context, paths []string, full bool) ([]Note, error) {
	if err := t.flushHeld(ctx); err != nil {
		return nil, err
	}
	t.mu.Lock()
	var targets []*Entry
	if full {
		targets = t.loadedDirsLocked()
	} else {
		for _, p := range paths {
			if d := t.deepestLoadedLocked(p); d != nil {
				targets = append(targets, d)
			}
		}
	}
	t.mu.Unlock()
	got := map[*Entry]*listing{}
	err := t.v.View(ctx, func(tx *vault.Tx) error {
		for len(targets) > 0 {
			d := targets[len(targets)-1]
			targets = targets[:len(targets)-1]
			if got[d] != nil {
				continue
			}
			t.mu.Lock()
			p, ok := t.pathLocked(d)
			parent := d.parent
			t.mu.Unlock()
			if !ok {
				continue
			}
			self, err := tx.Stat(p)
			if err == nil && self.Ino == d.ino && self.Kind == vault.KindDir {
				list, err := tx.ReadDir(p)
				if err != nil {
					return err
				}
				got[d] = &listing{self: self, list: list}
				continue
			}
			if err != nil && !errors.Is(err, vault.ErrNotFound) && !errors.Is(err, vault.ErrNotDir) {
				return err
			}
			// Gone or replaced: its parent's listing says which.
			got[d] = &listing{gone: true}
			if parent != nil {
				targets = append(targets, parent)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	notes, relinked := t.apply(got)
	return t.recount(ctx, relinked, notes)
}

// recount reads again the link count of the hard-linked files that lost
// a name behind the tree's back and that no listing re-read: the name
// may have been removed or moved to a directory the tree never loaded,
// which only the vault knows. Caller holds t.nsMu exclusively.
func (t *Tree) recount(ctx context.Context, relinked map[*Entry]struct{}, notes []Note) ([]Note, error) {
	if len(relinked) == 0 {
		return notes, nil
	}
	err := t.v.View(ctx, func(tx *vault.Tx) error {
		for c := range relinked {
			t.mu.Lock()
			p, ok := t.pathLocked(c)
			t.mu.Unlock()
			if !ok {
				continue
			}
			st, err := tx.Stat(p)
			if errors.Is(err, vault.ErrNotFound) || errors.Is(err, vault.ErrNotDir) {
				continue // gone too: the next catch-up drops it
			}
			if err != nil {
				return err
			}
			t.mu.Lock()
			if st.Ino == c.ino && c.nlink != st.Nlink {
				c.nlink, c.ctime = st.Nlink, st.Ctime.UnixNano()
				notes = append(notes, Note{Path: p})
			}
			t.mu.Unlock()
		}
		return nil
	})
	return notes, err
}

// loadedDirsLocked lists every directory whose listing is cached. Caller
// holds t.mu.
func (t *Tree) loadedDirsLocked() []*Entry {
	var out []*Entry
	var walk func(d *Entry)
	walk = func(d *Entry) {
		if d.children == nil {
			return
		}
		out = append(out, d)
		for _, c := range d.children {
			if c.kind == vault.KindDir {
				walk(c)
			}
		}
	}
	walk(t.root)
	return out
}

// deepestLoadedLocked is the deepest cached directory on the way to the
// directory that holds p: below it nothing is cached. Caller holds t.mu.
func (t *Tree) deepestLoadedLocked(p string) *Entry {
	d := t.root
	if d.children == nil {
		return nil
	}
	comps, err := vault.CleanPath(p)
	if err != nil || len(comps) == 0 {
		return d
	}
	for _, name := range comps[:len(comps)-1] {
		c := d.children[name]
		if c == nil || c.kind != vault.KindDir || c.children == nil {
			break
		}
		d = c
	}
	return d
}

// apply brings the entries of the directories in got in line with the
// vault: first every new or moved name in every directory, then the
// removals, so that an entry that moved between two of them is moved,
// not dropped. The file data of the files involved is locked throughout,
// as a commit would. Caller holds t.nsMu exclusively.
func (t *Tree) apply(got map[*Entry]*listing) (notes []Note, relinked map[*Entry]struct{}) {
	locked := t.lockData(got)
	defer func() {
		for d := range locked {
			d.mu.Unlock()
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	fromVault := map[*Entry]bool{} // given the vault's attributes by a listing
	relinked = map[*Entry]struct{}{}
	replaced := map[*Entry][]place{}
	for d, l := range got {
		if l.gone || !t.currentLocked(d) || d.children == nil {
			continue
		}
		dp, ok := t.pathLocked(d)
		if !ok {
			continue
		}
		if changed(d, l.self) {
			d.refresh(l.self)
			notes = append(notes, Note{Path: dp})
		}
		for _, v := range l.list {
			c := d.children[v.Name]
			if c != nil && c.ino == v.Ino {
				notes = t.refreshLocked(c, v, childPath(dp, v.Name), locked, notes)
				fromVault[c] = true
				continue
			}
			n := t.metas[v.Ino]
			fromVault[n] = true
			linked := v.Nlink > 1 && v.Kind != vault.KindDir
			switch {
			case n == nil || n.unlinked:
				n = newEntry(v)
				t.metas[v.Ino] = n
			case linked:
				// Another name of a hard-linked file: its other
				// names stay, unless their listings drop them.
				notes = t.refreshLocked(n, v, childPath(dp, v.Name), locked, notes)
			default:
				// Moved here from another directory.
				if op := n.parent; op != nil && op.children != nil && op.children[n.name] == n {
					delete(op.children, n.name)
					if opp, ok := t.pathLocked(op); ok {
						notes = append(notes, Note{Path: opp, Name: n.name}, Note{Path: opp, Data: true})
					}
				}
				notes = t.refreshLocked(n, v, childPath(dp, v.Name), locked, notes)
			}
			if c != nil {
				replaced[d] = append(replaced[d], place{c, v.Name})
			}
			if linked {
				n.addPlaceLocked(d, v.Name)
			} else {
				n.parent, n.name = d, v.Name
			}
			d.children[v.Name] = n
			delete(d.negative, v.Name)
			notes = append(notes, Note{Path: dp, Name: v.Name}, Note{Path: dp, Data: true})
		}
	}
	for d, l := range got {
		if l.gone || !t.currentLocked(d) || d.children == nil {
			continue
		}
		dp, _ := t.pathLocked(d)
		names := make(map[string]struct{}, len(l.list))
		for _, v := range l.list {
			names[v.Name] = struct{}{}
		}
		gone := replaced[d] // (entry, name), not (directory, name)
		for name, c := range d.children {
			if _, ok := names[name]; !ok {
				delete(d.children, name)
				gone = append(gone, place{c, name})
				notes = append(notes, Note{Path: dp, Name: name}, Note{Path: dp, Data: true})
			}
		}
		for _, g := range gone {
			c := g.dir
			switch {
			case c.kind != vault.KindDir && d.children[g.name] != c && c.dropPlaceLocked(d, g.name):
				// One name of a hard-linked file; the others stay,
				// and its link count is read again unless a listing
				// just gave it.
				if !fromVault[c] {
					relinked[c] = struct{}{}
				}
			case c.parent == d && d.children[c.name] != c:
				t.dropLocked(c, locked)
			}
		}
	}
	return notes, relinked
}

// lockData locks the file data of every file the listings in got may
// touch: the cached children of those directories, and the entries the
// listings name. The mount holds t.nsMu exclusively, so nobody else holds
// two of them.
func (t *Tree) lockData(got map[*Entry]*listing) map[*fileData]struct{} {
	t.mu.Lock()
	set := map[*fileData]struct{}{}
	for d, l := range got {
		for _, c := range d.children {
			if c.data != nil {
				set[c.data] = struct{}{}
			}
		}
		for _, v := range l.list {
			if c := t.metas[v.Ino]; c != nil && c.data != nil {
				set[c.data] = struct{}{}
			}
		}
	}
	t.mu.Unlock()
	for d := range set {
		d.mu.Lock()
	}
	return set
}

// changed reports whether the vault's attributes of e differ from the
// cached ones.
func changed(e *Entry, v vault.Entry) bool {
	return e.stale || e.mode != uint32(v.Mode.Perm()) || e.size != v.Size || e.target != v.Target ||
		e.mtime != v.Mtime.UnixNano() || e.ctime != v.Ctime.UnixNano() || e.nlink != v.Nlink
}

// refreshLocked takes the vault's attributes of c at path p, unless the
// mount has changes of its own buffered for it (they win when
// committed). A file whose content changed loses its cached content and
// pages, and an open one reads the new content. Caller holds t.mu and
// the file data in locked.
func (t *Tree) refreshLocked(c *Entry, v vault.Entry, p string, locked map[*fileData]struct{}, notes []Note) []Note {
	if !changed(c, v) || (c.data != nil && c.data.dirty) {
		return notes
	}
	content := c.kind == vault.KindFile && (c.size != v.Size || c.mtime != v.Mtime.UnixNano() || c.ctime != v.Ctime.UnixNano())
	c.refresh(v)
	if c.nlink > 1 && c.kind != vault.KindDir {
		// A hard-linked file: the kernel may know it by another name.
		if q, ok := t.pathLocked(c); ok && q != p {
			notes = append(notes, Note{Path: q, Data: content})
		}
		for _, l := range c.links {
			if dp, ok := t.pathLocked(l.dir); ok {
				notes = append(notes, Note{Path: childPath(dp, l.name), Data: content})
			}
		}
	}
	if !content {
		return append(notes, Note{Path: p})
	}
	t.uncacheLocked(c)
	c.dropCache = true
	if d := c.data; d != nil {
		if _, ok := locked[d]; ok && !d.dirty && !d.orphan {
			d.size, d.base, d.vsize = v.Size, v.Size, v.Size
			d.vmtime, d.vctime = c.mtime, c.ctime
			if d.backingFile != nil {
				t.refills = append(t.refills, c) // once the locks are let go
			}
		}
	}
	return append(notes, Note{Path: p, Data: true})
}

// dropLocked forgets c, which the vault no longer has, and everything
// cached below it. An open file keeps its cached content, if any, for
// its descriptors, as an unlink through the mount does. Caller holds t.mu
// and the file data in locked.
func (t *Tree) dropLocked(c *Entry, locked map[*fileData]struct{}) {
	if d := c.data; d != nil && d.opens > 0 {
		if _, ok := locked[d]; ok && !d.orphan {
			d.orphan, d.orphanData = true, t.cachedLocked(c)
		}
	}
	for name, k := range c.children {
		switch {
		case k.kind != vault.KindDir && k.dropPlaceLocked(c, name):
			// A hard-linked file keeps its names elsewhere.
		case k.parent == c:
			t.dropLocked(k, locked)
		}
	}
	t.removeLocked(c)
}

// notify passes notes on to the kernel, each once. No lock may be held:
// the kernel may wait for a request in flight, which may wait for one.
func (t *Tree) notify(notes []Note) {
	if len(notes) == 0 {
		return
	}
	seen := map[Note]bool{}
	uniq := notes[:0:0]
	for _, n := range notes {
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	t.kernel.Forget(uniq)
}

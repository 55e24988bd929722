package vault

import (
	"fmt"
	"sync"
)

// Moving an inode back out of the hidden directory (docs/decisions.md
// §21, §29). An inode with more than one name lives in the hidden
// directory and each name is a stub; once only one name is left, that
// name becomes the inode again: the stub's dirent points at the inode's
// node itself, so its number, content and attributes stay exactly what
// they were, and reads go the one-statement way again (fastread.go bails
// out on stubs). Nothing a caller can see changes: no event, no audit
// record, no change in a change summary (diff resolves a stub to its
// inode, and compares the same node under the name).
//
// The remaining name's path is not stored anywhere the unlink can find
// it without walking the tree, so the store keeps hints in memory: the
// paths that Link gave the inode's names, and the path of any lookup
// that found an inode with one name. When an unlink leaves one name, or
// a lookup finds such a name, the inode is due; at the end of the next
// write transaction of its vault (the same one, for an unlink), each due
// inode's hinted paths are checked and the one that still names it is
// moved back. A hint that is stale (renamed since, another process's
// link) costs one walk and nothing else: the inode stays in the hidden
// directory until a lookup finds its name. git's link-then-unlink of
// every loose object is the case that matters, and its hints are fresh.

// maxHintedInodes bounds the hints kept per vault; past it they are
// dropped and rebuilt from the next links and lookups.
const maxHintedInodes = 4096

// maxDuePerTx bounds the inodes one transaction moves back, so that a
// burst of lookups cannot make one write slow.
const maxDuePerTx = 256

// linkHints are the store's hints, by vault id. Its own lock: reads note
// hints too.
type linkHints struct {
	mu sync.Mutex
	m  map[int64]*vaultHints
	// moved counts inodes moved back (tests read it).
	moved int64
}

type vaultHints struct {
	paths map[string][]string // by inode (stub target): paths of its names, newest last
	due   map[string]bool     // inodes with one name left
}

func (h *linkHints) vault(id int64) *vaultHints {
	if h.m == nil {
		h.m = map[int64]*vaultHints{}
	}
	vh := h.m[id]
	if vh == nil || len(vh.paths) > maxHintedInodes {
		vh = &vaultHints{paths: map[string][]string{}, due: map[string]bool{}}
		h.m[id] = vh
	}
	return vh
}

// note records that path names inode target in vault id; due marks the
// inode as having one name left.
func (h *linkHints) note(id int64, target, path string, due bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	vh := h.vault(id)
	ps := vh.paths[target]
	for i, q := range ps {
		if q == path {
			ps = append(ps[:i], ps[i+1:]...)
			break
		}
	}
	if len(ps) >= 4 {
		ps = ps[1:]
	}
	vh.paths[target] = append(ps, path)
	if due {
		vh.due[target] = true
	}
}

// due marks inode target of vault id as having one name left.
func (h *linkHints) due(id int64, target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if vh := h.vault(id); len(vh.paths[target]) > 0 {
		vh.due[target] = true
	}
}

// forget drops the hints of inode target (its last name is gone).
func (h *linkHints) forget(id int64, target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if vh := h.m[id]; vh != nil {
		delete(vh.paths, target)
		delete(vh.due, target)
	}
}

// take removes and returns up to n due inodes of vault id with their
// hinted paths.
func (h *linkHints) take(id int64, n int) map[string][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	vh := h.m[id]
	if vh == nil || len(vh.due) == 0 {
		return nil
	}
	out := map[string][]string{}
	for target := range vh.due {
		if len(out) == n {
			break
		}
		delete(vh.due, target)
		out[target] = vh.paths[target]
		delete(vh.paths, target)
	}
	return out
}

func (h *linkHints) count() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.moved
}

// relinkDue moves back the due inodes of the transaction's vault whose
// last name a hint still finds.
func (t *Tx) relinkDue() error {
	for target, paths := range t.s.hints.take(t.v.id, maxDuePerTx) {
		for i := len(paths) - 1; i >= 0; i-- {
			ok, err := t.relink(target, paths[i])
			if err != nil {
				return fmt.Errorf("move inode %s back to %s: %w", target, paths[i], err)
			}
			if ok {
				t.s.hints.mu.Lock()
				t.s.hints.moved++
				t.s.hints.mu.Unlock()
				break
			}
		}
	}
	return nil
}

// relink moves inode target back to path if path is a stub of it and the
// inode has one name; ok says it did. A path that no longer names it is
// not an error.
func (t *Tx) relink(target, path string) (ok bool, err error) {
	const op = "relink"
	comps, err := CleanPath(path)
	if err != nil || len(comps) == 0 {
		return false, nil
	}
	// Until something changed, a failure only means the hint does not
	// lead to the inode: a tidy-up never fails the transaction it rides.
	chain, err := t.walk(op, path, comps)
	if err != nil {
		return false, nil
	}
	stub := chain[len(chain)-1]
	if stub.kind != kindLink || stub.target != target {
		return false, nil
	}
	ichain, icomps, err := t.inodeOf(op, path, stub)
	if err != nil {
		return false, nil
	}
	if ichain[2].nlink != 1 {
		return false, nil
	}
	inode := ichain[2].id
	// Out of the hidden directory...
	if err := t.makeWritable(ichain[:2], icomps[:1]); err != nil {
		return false, err
	}
	if err := t.unlink(ichain[1].id, target); err != nil {
		return false, err
	}
	// ...and under its name, in place of the stub. The parent is walked
	// again: the root may have been copied just now.
	parent, err := t.walk(op, path, comps[:len(comps)-1])
	if err != nil {
		return false, err
	}
	if err := t.makeWritable(parent, comps[:len(comps)-1]); err != nil {
		return false, err
	}
	if err := t.link(parent[len(parent)-1].id, comps[len(comps)-1], inode); err != nil {
		return false, err
	}
	if t.owned(stub) {
		if _, err := t.exec(`DELETE FROM nodes WHERE id=?`, stub.id); err != nil {
			return false, err
		}
	}
	return true, nil
}

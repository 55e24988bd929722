package vault

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
)

// Path walks. A path of k components resolves in one SQL statement: a
// chain of k LEFT JOINs (dirent, then node, per component), prepared once
// per k. Each join is an index lookup, and the missing component ends the
// chain: its columns and all deeper ones are NULL. This costs about half of
// what one recursive query does (the recursion needs a queue table and
// more), and a tenth of two statements per component. Longer paths, rare,
// use the recursive query.
//
// A walk loads in full only the node the path names; the directories above
// it come back with just what a change needs (id, owner, epoch, kind):
// copying a frozen one is done in SQL (insertCopy) and touching one only
// sets its times (touchDir). Every column read costs, through the driver,
// about as much as an index lookup.

// maxJoinWalk is the longest path walked with joins.
const maxJoinWalk = 16

// finalCols are the columns of the node a walk names, as scanFinal reads
// them; %[1]d is the node's alias number. Dense chunk lists longer than
// ?2 bytes are left out (see node.lazy); a list with hole runs is always
// loaded, as its records cannot be found by position.
var finalCols = `n%[1]d.id, n%[1]d.vault, n%[1]d.epoch, n%[1]d.ino, n%[1]d.kind, n%[1]d.mode, n%[1]d.size, n%[1]d.mtime, n%[1]d.ctime, n%[1]d.target, ` +
	fmt.Sprintf(`CASE WHEN length(n%%[1]d.chunks) <= ?2 OR length(n%%[1]d.chunks) < (n%%[1]d.size + %d) / %d * %d THEN n%%[1]d.chunks END`, ChunkSize-1, ChunkSize, hashLen) +
	`, n%[1]d.uid, n%[1]d.gid, n%[1]d.rdev, n%[1]d.atime, n%[1]d.nlink`

const nFinalCols = 16

// joinWalkSQL()[k] walks k components (?3, ?4, ...) from node ?1 and
// returns one row: id, vault, epoch and kind of each directory above the
// last component, then finalCols of the last. Built at first use (see
// fastReadSQL).
var joinWalkSQL = sync.OnceValue(func() (qs [maxJoinWalk + 1]string) {
	for k := range qs {
		var b strings.Builder
		b.WriteString(`SELECT `)
		for i := range k {
			fmt.Fprintf(&b, `n%[1]d.id, n%[1]d.vault, n%[1]d.epoch, n%[1]d.kind, `, i)
		}
		fmt.Fprintf(&b, finalCols, k)
		b.WriteString(` FROM nodes n0`)
		writeJoins(&b, k, 3)
		b.WriteString(` WHERE n0.id = ?1`)
		qs[k] = b.String()
	}
	return qs
})

// writeJoins appends the joins of a walk of k components from n0, whose
// names are parameters ?first, ?first+1, ...
func writeJoins(b *strings.Builder, k, first int) {
	for i := 1; i <= k; i++ {
		fmt.Fprintf(b, ` LEFT JOIN dirents d%[1]d ON d%[1]d.dir = n%[2]d.id AND d%[1]d.name = ?%[3]d LEFT JOIN nodes n%[1]d ON n%[1]d.id = d%[1]d.child`,
			i, i-1, first+i-1)
	}
}

// recWalkSQL resolves a path of any length with a recursive query. From
// node ?1 it follows the components listed in ?3, each followed by '/'
// ("a/b/" for a/b; names never hold '/'), and returns each node on the way
// with its depth, 0 being node ?1. It stops at the first component that is
// missing, or that names a non-directory's entry (such a node has no
// dirents).
var recWalkSQL = `WITH RECURSIVE w(depth, id, rest) AS (
	SELECT 0, ?1, ?3
	UNION ALL
	SELECT w.depth + 1, d.child, substr(w.rest, instr(w.rest, '/') + 1)
	FROM w JOIN dirents d ON d.dir = w.id AND d.name = substr(w.rest, 1, instr(w.rest, '/') - 1)
	WHERE w.rest != ''
) SELECT w.depth, ` + strings.ReplaceAll(fmt.Sprintf(finalCols, 0), "n0.", "n.") + `
FROM w JOIN nodes n ON n.id = w.id`

// walkArgs are the parameters of a walk of comps from node root.
func walkArgs(root int64, comps []string) []any {
	args := make([]any, 0, len(comps)+3)
	args = append(args, root, lazyListBytes)
	if len(comps) > maxJoinWalk {
		return append(args, strings.Join(comps, "/")+"/")
	}
	for _, c := range comps {
		args = append(args, c)
	}
	return args
}

// scanFinal fills n from the finalCols values v; ok is false when they
// are NULL (the node is missing).
func scanFinal(n *node, v []any) (ok bool) {
	if v[0] == nil {
		return false
	}
	n.id, n.vault, n.epoch, n.ino = asInt(v[0]), asInt(v[1]), asInt(v[2]), asInt(v[3])
	n.kind, n.mode, n.size = Kind(asInt(v[4])), uint32(asInt(v[5])), asInt(v[6])
	n.mtime, n.ctime, n.target = asInt(v[7]), asInt(v[8]), asString(v[9])
	n.chunks, _ = v[10].([]byte)
	n.scanAttrs(v[11:])
	n.setLazy()
	return true
}

func asInt(v any) int64 {
	i, _ := v.(int64)
	return i
}

func asString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

// scanValues reads one row of n columns as driver values (int64, string,
// []byte or nil): cheaper than typed Scan destinations, which go through
// reflection.
func scanValues(sc scanner, n int) ([]any, error) {
	v := make([]any, n)
	p := make([]any, n)
	for i := range v {
		p[i] = &v[i]
	}
	return v, sc.Scan(p...)
}

// walkPrefix resolves as much of comps as exists, from the root, in one
// statement: chain[0] is the root and chain[i] the node of comps[i-1], for
// the longest prefix of comps that resolves. Only the node of all of comps
// is loaded in full (see above); the others are partial.
func (t *Tx) walkPrefix(comps []string) ([]*node, error) {
	k := len(comps)
	if k > maxJoinWalk {
		return t.walkRecursive(comps)
	}
	if k >= 2 {
		if chain, ok, err := t.walkFromCached(comps); ok || err != nil {
			return chain, err
		}
	}
	v, err := scanValues(t.row(joinWalkSQL()[k], walkArgs(t.v.root, comps)...), 4*k+nFinalCols)
	if err != nil {
		return nil, fmt.Errorf("load node %d: walk %q: %w", t.v.root, comps, mapSQLErr(err))
	}
	chain := make([]*node, 0, k+1)
	for i := range k {
		w := v[4*i : 4*i+4]
		if w[0] == nil {
			return chain, nil
		}
		chain = append(chain, &node{id: asInt(w[0]), vault: asInt(w[1]), epoch: asInt(w[2]), kind: Kind(asInt(w[3])), partial: true})
	}
	n := &node{}
	if scanFinal(n, v[4*k:]) {
		chain = append(chain, n)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("load node %d: %w", t.v.root, sql.ErrNoRows)
	}
	if k >= 2 {
		t.cacheDir(comps[:k-1], chain)
	}
	return chain, nil
}

// A write transaction that changes many entries of a few directories (a
// burst of the mount's queued creates, removals and renames: rm -rf, cp
// -r, git) walks the same directories again and again. Each walk is one
// statement, but a statement of k joins: walkCache keeps the chain of
// each directory whose entries a walk named, so that the next walk into
// it joins one component from the directory instead of k from the root
// (rm -rf of a tree 4 deep: a third of the vault's CPU was path walks).
//
// A chain is kept only while it cannot have changed: every node on it is
// owned by this transaction's vault and epoch (so makeWritable will not
// copy it, and a checkpoint, which bumps the epoch, retires it), the
// vault's root is the one it was walked from, and no dirent it went
// through was linked or unlinked since (link and unlink drop the whole
// cache when they touch one; so do the statements that delete dirents
// in bulk). It lives as long as the Tx.
type walkCache struct {
	root int64
	dirs map[string][]node
	deps map[direntKey]struct{}
}

// direntKey names one directory entry: the directory's node id and the
// name in it.
type direntKey struct {
	dir  int64
	name string
}

// maxWalkCache bounds the directories a transaction keeps chains of; a
// transaction that walks more starts the cache afresh.
const maxWalkCache = 4096

// walkFromCached is walkPrefix for comps (two or more components) whose
// parent directory's chain is cached: one join from that directory. ok is
// false when it is not cached (or no longer there), and the caller walks
// from the root.
func (t *Tx) walkFromCached(comps []string) (chain []*node, ok bool, err error) {
	wc := t.wc
	if wc == nil || wc.root != t.v.root {
		return nil, false, nil
	}
	k := len(comps)
	dir, found := wc.dirs[strings.Join(comps[:k-1], "/")]
	if !found {
		return nil, false, nil
	}
	for i := range dir {
		if !t.owned(&dir[i]) {
			t.wc = nil
			return nil, false, nil
		}
	}
	parent := dir[len(dir)-1].id
	v, err := scanValues(t.row(joinWalkSQL()[1], walkArgs(parent, comps[k-1:])...), 4+nFinalCols)
	if err != nil || v[0] == nil {
		// The directory is gone: the cache missed a change. Walk again
		// from the root, which fails the way it must.
		t.wc = nil
		return nil, false, nil
	}
	chain = make([]*node, len(dir), k+1)
	for i := range dir {
		c := dir[i]
		chain[i] = &c
	}
	n := &node{}
	if scanFinal(n, v[4:]) {
		chain = append(chain, n)
	}
	return chain, true, nil
}

// cacheDir keeps the chain of directory comps (chain[:len(comps)+1], of
// a walk of comps or of a longer path) when every node of it is a
// directory owned by this transaction's vault and epoch.
func (t *Tx) cacheDir(comps []string, chain []*node) {
	if len(chain) < len(comps)+1 {
		return
	}
	chain = chain[:len(comps)+1]
	for _, n := range chain {
		if n.kind != KindDir || !t.owned(n) {
			return
		}
	}
	wc := t.wc
	if wc == nil || wc.root != t.v.root || len(wc.dirs) >= maxWalkCache {
		wc = &walkCache{root: t.v.root, dirs: map[string][]node{}, deps: map[direntKey]struct{}{}}
		t.wc = wc
	}
	dir := make([]node, len(chain))
	for i, n := range chain {
		dir[i] = node{id: n.id, vault: n.vault, epoch: n.epoch, kind: n.kind, partial: true}
		if i > 0 {
			wc.deps[direntKey{chain[i-1].id, comps[i-1]}] = struct{}{}
		}
	}
	wc.dirs[strings.Join(comps, "/")] = dir
}

// direntChanged drops the walk cache if dirent dir/name is on a cached
// chain; every statement that links or unlinks an entry calls it.
func (t *Tx) direntChanged(dir int64, name string) {
	if t.wc == nil {
		return
	}
	if _, ok := t.wc.deps[direntKey{dir, name}]; ok {
		t.wc = nil
	}
}

// walkRecursive is walkPrefix for long paths, with recWalkSQL; it loads
// every node in full.
func (t *Tx) walkRecursive(comps []string) ([]*node, error) {
	rows, err := t.query(recWalkSQL, walkArgs(t.v.root, comps)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	all := make([]*node, len(comps)+1)
	count := 0
	for rows.Next() {
		v, err := scanValues(rows, 1+nFinalCols)
		if err != nil {
			return nil, err
		}
		depth := asInt(v[0])
		n := &node{}
		if depth < 0 || depth > int64(len(comps)) || all[depth] != nil || !scanFinal(n, v[1:]) {
			return nil, fmt.Errorf("walk %q: bad row at depth %d", comps, depth)
		}
		all[depth] = n
		count++
	}
	if err := rows.Err(); err != nil {
		return nil, mapSQLErr(err)
	}
	// A dirent whose node is missing leaves a gap: the walk ends there.
	k := 0
	for k < len(all) && all[k] != nil {
		k++
	}
	if k == 0 {
		return nil, fmt.Errorf("load node %d: %w", t.v.root, sql.ErrNoRows)
	}
	return all[:k], nil
}

// resolved cuts chain, a prefix found by walkPrefix for n or more
// components, to n components and fails as a walk of them would: with
// ErrNotDir when a component is not a directory, else with ErrNotFound.
func resolved(op, p string, chain []*node, n int) ([]*node, error) {
	if len(chain) < n+1 {
		if chain[len(chain)-1].kind != KindDir {
			return nil, pathErr(op, p, ErrNotDir)
		}
		return nil, pathErr(op, p, ErrNotFound)
	}
	return chain[: n+1 : n+1], nil
}

// walk resolves comps from the root. chain[0] is the root and chain[i] the
// node of comps[i-1]. Symlinks are not followed: vault paths name entries
// exactly, so no link can lead a request outside the vault.
func (t *Tx) walk(op, p string, comps []string) ([]*node, error) {
	chain, err := t.walkPrefix(comps)
	if err != nil {
		return nil, err
	}
	return resolved(op, p, chain, len(comps))
}

// entryOf validates p (which must not be the root) and resolves it in one
// walk: parent is the chain of p's parent directory, n is p's node or nil
// when p does not exist. It fails with ErrNotDir if a component of the
// parent is not a directory.
func (t *Tx) entryOf(op, p string) (comps []string, parent []*node, n *node, err error) {
	comps, err = CleanPath(p)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(comps) == 0 {
		return nil, nil, nil, pathErr(op, p, ErrInvalidPath)
	}
	all, err := t.walkPrefix(comps)
	if err != nil {
		return nil, nil, nil, err
	}
	parent, err = resolved(op, p, all, len(comps)-1)
	if err != nil {
		return nil, nil, nil, err
	}
	if parent[len(parent)-1].kind != KindDir {
		return nil, nil, nil, pathErr(op, p, ErrNotDir)
	}
	if len(all) == len(comps)+1 {
		n = all[len(comps)]
	}
	return comps, parent, n, nil
}

package vault

import (
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// Kind is the type of a tree entry.
type Kind uint8

// Entry kinds.
const (
	KindFile    Kind = 1
	KindDir     Kind = 2
	KindSymlink Kind = 3
)

// String is the kind's name on the wire: "file", "dir" or "symlink".
func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	}
	return "unknown"
}

// Entry describes one file, directory or symlink.
type Entry struct {
	Name   string
	Path   string
	Kind   Kind
	Size   int64
	Mode   fs.FileMode // permission bits only
	Mtime  time.Time
	Ctime  time.Time
	Ino    uint64 // stable across mounts and processes; a fork keeps its source's numbers
	Target string // symlink target
}

// node is one version of one tree entry.
type node struct {
	id     int64
	vault  int64
	epoch  int64
	ino    int64
	kind   Kind
	mode   uint32
	size   int64
	mtime  int64
	ctime  int64
	target string
	chunks []byte // concatenated SHA-256 hashes, one per ChunkSize of content

	// lazy: the chunk list was left in the database (a path walk loads
	// long lists only on demand, see lazyListBytes); chunks is nil. Reads
	// fetch the hashes they need by range, and a change to a range is kept
	// in splice until updateNode splices it into the stored list.
	lazy   bool
	splice *splice
}

// lazyListBytes is the longest chunk list a path walk loads: 32 hashes, a
// file of 2 MiB. A partial write to a larger file moves the few hashes it
// changes, not the file's whole list (32 KiB for 64 MiB). A variable so
// that tests can make every list of more than one hash lazy.
var lazyListBytes int64 = 32 * hashLen

// splice is a change to a lazy chunk list: the new list is the stored
// list's first keep bytes, then ins, then its bytes [tailFrom, tailTo).
type splice struct {
	keep             int64
	ins              []byte
	tailFrom, tailTo int64
}

// setLazy marks n lazy when its chunk list was not loaded: a non-empty
// file always has one (nchunks(size) hashes).
func (n *node) setLazy() { n.lazy = n.kind == KindFile && n.chunks == nil && n.size > 0 }

// hashes returns the hashes of chunks [from, to) of file n.
func (t *Tx) hashes(n *node, from, to int64) ([]byte, error) {
	if from >= to {
		return nil, nil
	}
	if !n.lazy {
		return n.chunks[from*hashLen : to*hashLen], nil
	}
	if n.splice != nil {
		return nil, fmt.Errorf("node %d: chunk list read before its change was stored", n.id)
	}
	var b []byte
	if err := t.row(`SELECT substr(chunks, ?, ?) FROM nodes WHERE id=?`, from*hashLen+1, (to-from)*hashLen, n.id).Scan(&b); err != nil {
		return nil, fmt.Errorf("load chunk list of node %d: %w", n.id, mapSQLErr(err))
	}
	if int64(len(b)) != (to-from)*hashLen {
		return nil, fmt.Errorf("node %d: chunk list too short: %w", n.id, ErrConflict)
	}
	return b, nil
}

// loadChunks loads n's whole chunk list if it is lazy.
func (t *Tx) loadChunks(n *node) error {
	if !n.lazy {
		return nil
	}
	if n.splice != nil {
		return fmt.Errorf("node %d: chunk list read before its change was stored", n.id)
	}
	var b []byte
	if err := t.row(`SELECT chunks FROM nodes WHERE id=?`, n.id).Scan(&b); err != nil {
		return fmt.Errorf("load chunk list of node %d: %w", n.id, mapSQLErr(err))
	}
	if b == nil {
		b = []byte{}
	}
	n.chunks, n.lazy = b, false
	return nil
}

const nodeCols = `id, vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks`

func scanNode(sc interface{ Scan(...any) error }) (*node, error) {
	n := &node{}
	err := sc.Scan(&n.id, &n.vault, &n.epoch, &n.ino, &n.kind, &n.mode, &n.size, &n.mtime, &n.ctime, &n.target, &n.chunks)
	return n, err
}

func (n *node) entry(name, p string) Entry {
	return Entry{
		Name: name, Path: p, Kind: n.kind, Size: n.size, Mode: fs.FileMode(n.mode) & fs.ModePerm,
		Mtime: time.Unix(0, n.mtime), Ctime: time.Unix(0, n.ctime), Ino: uint64(n.ino), Target: n.target,
	}
}

// owned reports whether the transaction's vault may change n in place.
func (t *Tx) owned(n *node) bool { return n.vault == t.v.id && n.epoch == t.v.epoch }

func (t *Tx) node(id int64) (*node, error) {
	n, err := scanNode(t.row(`SELECT `+nodeCols+` FROM nodes WHERE id=?`, id))
	if err != nil {
		return nil, fmt.Errorf("load node %d: %w", id, mapSQLErr(err))
	}
	return n, nil
}

func (t *Tx) insertNode(n *node) (int64, error) {
	n.vault, n.epoch = t.v.id, t.v.epoch
	res, err := t.exec(`INSERT INTO nodes(vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks) VALUES(?,?,?,?,?,?,?,?,?,?)`,
		n.vault, n.epoch, n.ino, n.kind, n.mode, n.size, n.mtime, n.ctime, n.target, n.chunks)
	if err != nil {
		return 0, fmt.Errorf("insert node: %w", err)
	}
	n.id, err = res.LastInsertId()
	return n.id, err
}

// insertCopy stores a copy of frozen node n, taking its chunk list from
// the database, and returns the copy.
func (t *Tx) insertCopy(n *node) (*node, error) {
	if !n.lazy {
		c := *n
		_, err := t.insertNode(&c)
		return &c, err
	}
	c := *n
	c.vault, c.epoch = t.v.id, t.v.epoch
	res, err := t.exec(`INSERT INTO nodes(vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks) SELECT ?, ?, ino, kind, mode, size, mtime, ctime, target, chunks FROM nodes WHERE id=?`,
		c.vault, c.epoch, n.id)
	if err != nil {
		return nil, fmt.Errorf("copy node: %w", err)
	}
	c.id, err = res.LastInsertId()
	return &c, err
}

// updateNode stores n's attributes and chunk list; a lazy list is left
// as stored or changed by its pending splice.
func (t *Tx) updateNode(n *node) error {
	var err error
	switch {
	case n.splice != nil:
		sp := n.splice
		_, err = t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=?, chunks=CAST(substr(chunks, 1, ?) || coalesce(?, x'') || substr(chunks, ?, ?) AS BLOB) WHERE id=?`,
			n.mode, n.size, n.mtime, n.ctime, n.target, sp.keep, sp.ins, sp.tailFrom+1, max(0, sp.tailTo-sp.tailFrom), n.id)
		if err == nil {
			n.splice = nil
		}
	case n.lazy:
		_, err = t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=? WHERE id=?`,
			n.mode, n.size, n.mtime, n.ctime, n.target, n.id)
	default:
		_, err = t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=?, chunks=? WHERE id=?`,
			n.mode, n.size, n.mtime, n.ctime, n.target, n.chunks, n.id)
	}
	if err != nil {
		return fmt.Errorf("update node: %w", err)
	}
	return nil
}

func (t *Tx) newIno() int64 {
	i := t.v.nextIno
	t.v.nextIno++
	return i
}

type dirent struct {
	name  string
	child int64
}

// dirents lists directory dir, sorted by name.
func (t *Tx) dirents(dir int64) ([]dirent, error) {
	rows, err := t.query(`SELECT name, child FROM dirents WHERE dir=? ORDER BY name`, dir)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	defer rows.Close()
	var out []dirent
	for rows.Next() {
		var d dirent
		if err := rows.Scan(&d.name, &d.child); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// walkSQL resolves a path in one statement. From node ?1 it follows the
// components listed in ?2, each followed by '/' ("a/b/" for a/b; names
// never hold '/'), and returns each node on the way with its depth, 0
// being node ?1. It stops at the first component that is missing, or that
// names a non-directory's entry (such a node has no dirents). Chunk lists
// longer than ?3 bytes are left out (NULL): see node.lazy.
var walkSQL = `WITH RECURSIVE w(depth, id, rest) AS (
	SELECT 0, ?1, ?2
	UNION ALL
	SELECT w.depth + 1, d.child, substr(w.rest, instr(w.rest, '/') + 1)
	FROM w JOIN dirents d ON d.dir = w.id AND d.name = substr(w.rest, 1, instr(w.rest, '/') - 1)
	WHERE w.rest != ''
) SELECT w.depth, n.id, n.vault, n.epoch, n.ino, n.kind, n.mode, n.size, n.mtime, n.ctime, n.target,
	CASE WHEN length(n.chunks) <= ?3 THEN n.chunks END
FROM w JOIN nodes n ON n.id = w.id`

// walkArg is comps as walkSQL takes them.
func walkArg(comps []string) string {
	if len(comps) == 0 {
		return ""
	}
	return strings.Join(comps, "/") + "/"
}

// scanChain reads the rows of walkSQL for a walk of n components and
// returns the nodes found, root first: the longest resolved prefix. With
// extra non-nil the rows have one more column, a blob, and extra receives
// its value in the deepest row. ok is false when the start node itself is
// missing or the chain has a gap, which only a damaged store can produce.
func scanChain(rows *sql.Rows, n int, extra *[]byte) (chain []*node, ok bool, err error) {
	defer rows.Close()
	all := make([]*node, n+1)
	count, deepest := 0, -1
	for rows.Next() {
		var depth int
		var b []byte
		nd := &node{}
		dest := []any{&depth, &nd.id, &nd.vault, &nd.epoch, &nd.ino, &nd.kind, &nd.mode, &nd.size, &nd.mtime, &nd.ctime, &nd.target, &nd.chunks}
		if extra != nil {
			dest = append(dest, &b)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, false, err
		}
		if depth < 0 || depth > n || all[depth] != nil {
			return nil, false, nil
		}
		nd.setLazy()
		all[depth] = nd
		count++
		if extra != nil && depth > deepest {
			deepest, *extra = depth, b
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, mapSQLErr(err)
	}
	for i := range count {
		if all[i] == nil {
			return nil, false, nil
		}
	}
	return all[:count], count > 0, nil
}

// walkPrefix resolves as much of comps as exists, from the root, in one
// statement: chain[0] is the root and chain[i] the node of comps[i-1], for
// the longest prefix of comps that resolves.
func (t *Tx) walkPrefix(comps []string) ([]*node, error) {
	rows, err := t.query(walkSQL, t.v.root, walkArg(comps), lazyListBytes)
	if err != nil {
		return nil, err
	}
	chain, ok, err := scanChain(rows, len(comps), nil)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("load node %d: walk %q: %w", t.v.root, comps, sql.ErrNoRows)
	}
	return chain, nil
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

// resolve validates p and returns its node chain.
func (t *Tx) resolve(op, p string) ([]string, []*node, error) {
	comps, err := CleanPath(p)
	if err != nil {
		return nil, nil, err
	}
	chain, err := t.walk(op, p, comps)
	return comps, chain, err
}

// makeWritable copies every frozen node of chain, top down, so the chain
// can be changed in place. chain[i] must be the entry comps[i-1].
func (t *Tx) makeWritable(chain []*node, comps []string) error {
	for i, n := range chain {
		if t.owned(n) {
			continue
		}
		c, err := t.insertCopy(n)
		if err != nil {
			return err
		}
		if n.kind == KindDir {
			if _, err := t.exec(`INSERT INTO dirents(dir, name, child) SELECT ?, name, child FROM dirents WHERE dir=?`, c.id, n.id); err != nil {
				return fmt.Errorf("copy directory: %w", err)
			}
		}
		if i == 0 {
			t.v.root = c.id
		} else if err := t.link(chain[i-1].id, comps[i-1], c.id); err != nil {
			return err
		}
		chain[i] = c
	}
	return nil
}

// link points dir/name at child, replacing any entry of that name.
func (t *Tx) link(dir int64, name string, child int64) error {
	_, err := t.exec(`INSERT INTO dirents(dir, name, child) VALUES(?,?,?) ON CONFLICT(dir, name) DO UPDATE SET child=excluded.child`, dir, name, child)
	if err != nil {
		return fmt.Errorf("link %q: %w", name, err)
	}
	return nil
}

func (t *Tx) unlink(dir int64, name string) error {
	_, err := t.exec(`DELETE FROM dirents WHERE dir=? AND name=?`, dir, name)
	return err
}

// touchDir records that directory n's entries changed.
func (t *Tx) touchDir(n *node) error {
	n.mtime, n.ctime = t.now, t.now
	if _, err := t.exec(`UPDATE nodes SET mtime=?, ctime=? WHERE id=?`, n.mtime, n.ctime, n.id); err != nil {
		return fmt.Errorf("update node: %w", err)
	}
	return nil
}

// drop forgets the subtree at n after it was unlinked: nodes owned by this
// epoch are deleted at once (nothing else can reference them), frozen ones
// are left for garbage collection because a checkpoint or fork may share
// them. It also subtracts the subtree from the vault's usage counters.
func (t *Tx) drop(n *node) error {
	if n.kind == KindDir {
		ds, err := t.dirents(n.id)
		if err != nil {
			return err
		}
		for _, d := range ds {
			c, err := t.node(d.child)
			if err != nil {
				return err
			}
			if err := t.drop(c); err != nil {
				return err
			}
		}
		t.v.dirs--
	} else {
		t.v.files--
		if n.kind == KindFile {
			t.v.bytes -= n.size
		}
	}
	if !t.owned(n) {
		return nil
	}
	if n.kind == KindDir {
		if _, err := t.exec(`DELETE FROM dirents WHERE dir=?`, n.id); err != nil {
			return err
		}
	}
	_, err := t.exec(`DELETE FROM nodes WHERE id=?`, n.id)
	return err
}

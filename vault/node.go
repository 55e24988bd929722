package vault

import (
	"database/sql"
	"fmt"
	"io/fs"
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
	chunks []byte // the chunk list: content hashes and holes (chunklist.go)

	// lazy: the chunk list was left in the database (a path walk loads
	// long dense lists only on demand, see lazyListBytes); chunks is nil. Reads
	// fetch the hashes they need by range, and a change to a range is kept
	// in splice until updateNode splices it into the stored list.
	lazy   bool
	splice *splice
	// partial: only id, vault, epoch and kind were loaded (a directory
	// above the node a path walk names).
	partial bool
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
// file always has one, and a walk leaves out dense ones only.
func (n *node) setLazy() { n.lazy = n.kind == KindFile && n.chunks == nil && n.size > 0 }

// hashes returns the records that cover chunks [from, to) of file n (see
// chunklist.go), one per chunk if the list is dense.
func (t *Tx) hashes(n *node, from, to int64) ([]byte, error) {
	if from >= to {
		return nil, nil
	}
	if !n.lazy {
		if dense(n.chunks, n.size) {
			return n.chunks[from*hashLen : to*hashLen], nil
		}
		return cutList(n.chunks, from, to), nil
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

// insertCopy stores a copy of frozen node n, owned by this transaction's
// vault and epoch, and returns it. The row is copied in SQL, so n may be
// partial or lazy: a frozen node never changes, so the stored row is n.
func (t *Tx) insertCopy(n *node) (*node, error) {
	c := *n
	c.vault, c.epoch = t.v.id, t.v.epoch
	res, err := t.exec(`INSERT INTO nodes(vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks) SELECT ?, ?, ino, kind, mode, size, mtime, ctime, target, chunks FROM nodes WHERE id=?`,
		c.vault, c.epoch, n.id)
	if err != nil {
		return nil, fmt.Errorf("copy node: %w", err)
	}
	if k, err := res.RowsAffected(); err != nil || k != 1 {
		return nil, fmt.Errorf("copy node %d: %d rows, %v: %w", n.id, k, err, sql.ErrNoRows)
	}
	if c.id, err = res.LastInsertId(); err != nil {
		return nil, err
	}
	if err := t.copyMeta(c.id, n.id); err != nil {
		return nil, err
	}
	return &c, nil
}

// updateNode stores n's attributes and chunk list; a lazy list is left
// as stored or changed by its pending splice.
func (t *Tx) updateNode(n *node) error {
	if n.partial {
		return fmt.Errorf("update node %d: not loaded", n.id)
	}
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

package vault

import (
	"database/sql"
	"errors"
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
	chunks []byte // concatenated SHA-256 hashes, one per ChunkSize of content
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

func (t *Tx) updateNode(n *node) error {
	_, err := t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=?, chunks=? WHERE id=?`,
		n.mode, n.size, n.mtime, n.ctime, n.target, n.chunks, n.id)
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

// lookup finds name in directory dir; ok is false when absent.
func (t *Tx) lookup(dir int64, name string) (int64, bool, error) {
	var child int64
	err := t.row(`SELECT child FROM dirents WHERE dir=? AND name=?`, dir, name).Scan(&child)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, mapSQLErr(err)
	}
	return child, true, nil
}

type dirent struct {
	name  string
	child int64
}

// dirents lists directory dir, sorted by name.
func (t *Tx) dirents(dir int64) ([]dirent, error) {
	rows, err := t.tx.QueryContext(t.ctx, `SELECT name, child FROM dirents WHERE dir=? ORDER BY name`, dir)
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

// walk resolves comps from the root. chain[0] is the root and chain[i] the
// node of comps[i-1]. Symlinks are not followed: vault paths name entries
// exactly, so no link can lead a request outside the vault.
func (t *Tx) walk(op, p string, comps []string) ([]*node, error) {
	root, err := t.node(t.v.root)
	if err != nil {
		return nil, err
	}
	chain := make([]*node, 1, len(comps)+1)
	chain[0] = root
	for i, c := range comps {
		cur := chain[i]
		if cur.kind != KindDir {
			return nil, pathErr(op, p, ErrNotDir)
		}
		id, ok, err := t.lookup(cur.id, c)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, pathErr(op, p, ErrNotFound)
		}
		n, err := t.node(id)
		if err != nil {
			return nil, err
		}
		chain = append(chain, n)
	}
	return chain, nil
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

// parentOf validates p (which must not be the root) and returns its parent
// directory chain; it fails with ErrNotDir if a component is not a dir.
func (t *Tx) parentOf(op, p string) ([]string, []*node, error) {
	comps, err := CleanPath(p)
	if err != nil {
		return nil, nil, err
	}
	if len(comps) == 0 {
		return nil, nil, pathErr(op, p, ErrInvalidPath)
	}
	chain, err := t.walk(op, p, comps[:len(comps)-1])
	if err != nil {
		return nil, nil, err
	}
	if chain[len(chain)-1].kind != KindDir {
		return nil, nil, pathErr(op, p, ErrNotDir)
	}
	return comps, chain, nil
}

// makeWritable copies every frozen node of chain, top down, so the chain
// can be changed in place. chain[i] must be the entry comps[i-1].
func (t *Tx) makeWritable(chain []*node, comps []string) error {
	for i, n := range chain {
		if t.owned(n) {
			continue
		}
		c := *n
		if _, err := t.insertNode(&c); err != nil {
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
		chain[i] = &c
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
	return t.updateNode(n)
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

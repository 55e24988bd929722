package vault

import (
	"database/sql"
	"fmt"
	"io/fs"
	"time"
)

// Kind is the type of a tree entry.
type Kind uint8

// Entry kinds. Fifos, sockets and device nodes hold no content; a device
// node's number is Entry.Rdev.
const (
	KindFile    Kind = 1
	KindDir     Kind = 2
	KindSymlink Kind = 3
	KindFifo    Kind = 4
	KindSocket  Kind = 5
	KindCharDev Kind = 6
	KindBlkDev  Kind = 7
)

// String is the kind's name on the wire: "file", "dir", "symlink", "fifo",
// "socket", "char" or "block".
func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	case KindFifo:
		return "fifo"
	case KindSocket:
		return "socket"
	case KindCharDev:
		return "char"
	case KindBlkDev:
		return "block"
	}
	return "unknown"
}

// special reports whether k is a fifo, socket or device node.
func (k Kind) special() bool { return k >= KindFifo && k <= KindBlkDev }

// NoOwner is Entry.Uid and Entry.Gid of an entry whose owner was never
// recorded (made through the vault API, or by a version before owners):
// a mount shows it as the mounting user's.
const NoOwner = -1

// Mode bits beyond the permissions, as the kernel numbers them.
const (
	unixSetuid = 0o4000
	unixSetgid = 0o2000
	unixSticky = 0o1000
)

// ModeBits is the mode's permission, setuid, setgid and sticky bits as
// the kernel numbers them (07777).
func ModeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= unixSetuid
	}
	if m&fs.ModeSetgid != 0 {
		b |= unixSetgid
	}
	if m&fs.ModeSticky != 0 {
		b |= unixSticky
	}
	return b
}

// FileMode is ModeBits' inverse: kernel mode bits as an fs.FileMode
// (permissions, ModeSetuid, ModeSetgid, ModeSticky; no type bits).
func FileMode(b uint32) fs.FileMode {
	m := fs.FileMode(b) & fs.ModePerm
	if b&unixSetuid != 0 {
		m |= fs.ModeSetuid
	}
	if b&unixSetgid != 0 {
		m |= fs.ModeSetgid
	}
	if b&unixSticky != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// ChownedMode is what a change of owner or group leaves of mode m of an
// entry of kind k, as on Linux: a non-directory loses its setuid bit, and
// its setgid bit if it is group-executable (without group execute the
// bit marks mandatory locking, not privilege).
func ChownedMode(k Kind, m fs.FileMode) fs.FileMode {
	if k == KindDir {
		return m
	}
	m &^= fs.ModeSetuid
	if m&0o010 != 0 {
		m &^= fs.ModeSetgid
	}
	return m
}

// Inherit is what a new entry of kind k, asked for with mode and group
// gid, gets in a directory with mode dirMode and group dirGid: in a setgid
// directory, the directory's group, and a new directory is setgid too.
func Inherit(dirMode fs.FileMode, dirGid int64, k Kind, mode fs.FileMode, gid int64) (fs.FileMode, int64) {
	if dirMode&fs.ModeSetgid == 0 {
		return mode, gid
	}
	if k == KindDir {
		mode |= fs.ModeSetgid
	}
	return mode, dirGid
}

// Entry describes one tree entry.
type Entry struct {
	Name   string
	Path   string
	Kind   Kind
	Size   int64
	Mode   fs.FileMode // permission bits, ModeSetuid, ModeSetgid and ModeSticky; no type bits
	Mtime  time.Time
	Ctime  time.Time
	Atime  time.Time
	Ino    uint64 // stable across mounts and processes; a fork keeps its source's numbers
	Target string // symlink target
	// Uid and Gid are the owner, NoOwner when none was recorded.
	Uid, Gid int64
	// Rdev is a device node's device number (Linux encoding).
	Rdev uint64
	// Nlink is the number of names of a non-directory (1), and 2 plus
	// the number of subdirectories of a directory.
	Nlink uint32
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
	// uid and gid are NoOwner when not recorded; atime 0 means mtime.
	uid, gid int64
	rdev     int64
	atime    int64
	nlink    int64 // directories: 2 + subdirectories; others 1
	// fresh: made by this request (newNode), so create gives it the
	// group of a setgid directory; a copy keeps its source's.
	fresh bool

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

const nodeCols = `id, vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks, uid, gid, rdev, atime, nlink`

func scanNode(sc interface{ Scan(...any) error }) (*node, error) {
	n := &node{}
	err := sc.Scan(&n.id, &n.vault, &n.epoch, &n.ino, &n.kind, &n.mode, &n.size, &n.mtime, &n.ctime, &n.target, &n.chunks,
		&n.uid, &n.gid, &n.rdev, &n.atime, &n.nlink)
	return n, err
}

// attrCols are the columns, after the content's, that only Entry shows.
const attrCols = `uid, gid, rdev, atime, nlink`

// scanAttrs fills n's attrCols from driver values.
func (n *node) scanAttrs(v []any) {
	n.uid, n.gid, n.rdev, n.atime, n.nlink = asInt(v[0]), asInt(v[1]), asInt(v[2]), asInt(v[3]), asInt(v[4])
}

func (n *node) entry(name, p string) Entry {
	atime := n.atime
	if atime == 0 {
		atime = n.mtime
	}
	nlink := n.nlink
	if nlink <= 0 {
		nlink = 1
	}
	return Entry{
		Name: name, Path: p, Kind: n.kind, Size: n.size, Mode: FileMode(n.mode),
		Mtime: time.Unix(0, n.mtime), Ctime: time.Unix(0, n.ctime), Atime: time.Unix(0, atime),
		Ino: uint64(n.ino), Target: n.target, Uid: n.uid, Gid: n.gid, Rdev: uint64(n.rdev), Nlink: uint32(nlink),
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
	res, err := t.exec(`INSERT INTO nodes(vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks, uid, gid, rdev, atime, nlink) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		n.vault, n.epoch, n.ino, n.kind, n.mode, n.size, n.mtime, n.ctime, n.target, n.chunks, n.uid, n.gid, n.rdev, n.atime, n.nlink)
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
	res, err := t.exec(`INSERT INTO nodes(vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks, uid, gid, rdev, atime, nlink) SELECT ?, ?, ino, kind, mode, size, mtime, ctime, target, chunks, uid, gid, rdev, atime, nlink FROM nodes WHERE id=?`,
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
		_, err = t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=?, uid=?, gid=?, atime=?, chunks=CAST(substr(chunks, 1, ?) || coalesce(?, x'') || substr(chunks, ?, ?) AS BLOB) WHERE id=?`,
			n.mode, n.size, n.mtime, n.ctime, n.target, n.uid, n.gid, n.atime, sp.keep, sp.ins, sp.tailFrom+1, max(0, sp.tailTo-sp.tailFrom), n.id)
		if err == nil {
			n.splice = nil
		}
	case n.lazy:
		_, err = t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=?, uid=?, gid=?, atime=? WHERE id=?`,
			n.mode, n.size, n.mtime, n.ctime, n.target, n.uid, n.gid, n.atime, n.id)
	default:
		_, err = t.exec(`UPDATE nodes SET mode=?, size=?, mtime=?, ctime=?, target=?, uid=?, gid=?, atime=?, chunks=? WHERE id=?`,
			n.mode, n.size, n.mtime, n.ctime, n.target, n.uid, n.gid, n.atime, n.chunks, n.id)
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
	t.direntChanged(dir, name)
	_, err := t.exec(`INSERT INTO dirents(dir, name, child) VALUES(?,?,?) ON CONFLICT(dir, name) DO UPDATE SET child=excluded.child`, dir, name, child)
	if err != nil {
		return fmt.Errorf("link %q: %w", name, err)
	}
	return nil
}

func (t *Tx) unlink(dir int64, name string) error {
	t.direntChanged(dir, name)
	_, err := t.exec(`DELETE FROM dirents WHERE dir=? AND name=?`, dir, name)
	return err
}

// touchDir records that directory n's entries changed.
func (t *Tx) touchDir(n *node) error { return t.touchDirLinks(n, 0) }

// touchDirLinks records that directory n's entries changed and that it
// gained subdirs subdirectories (lost, if negative). n may be partial.
func (t *Tx) touchDirLinks(n *node, subdirs int64) error {
	n.mtime, n.ctime = t.now, t.now
	if !n.partial {
		n.nlink += subdirs
	}
	if _, err := t.exec(`UPDATE nodes SET mtime=?, ctime=?, nlink=nlink+? WHERE id=?`, n.mtime, n.ctime, subdirs, n.id); err != nil {
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
		if n.kind == kindLink {
			// One name of a hard-linked inode (links.go).
			if err := t.unref(n); err != nil {
				return err
			}
		}
	}
	if !t.owned(n) {
		return nil
	}
	if n.kind == KindDir {
		t.wc = nil // its entries go in bulk
		if _, err := t.exec(`DELETE FROM dirents WHERE dir=?`, n.id); err != nil {
			return err
		}
	}
	_, err := t.exec(`DELETE FROM nodes WHERE id=?`, n.id)
	return err
}

package vault

import (
	"context"
	"fmt"
	"io/fs"
	"time"
)

// WriteOptions tune WriteFile.
type WriteOptions struct {
	Mode    fs.FileMode // permission bits for a new file (default 0644); when non-zero also applied to an existing one
	Append  bool        // add to the end instead of replacing
	Parents bool        // create missing parent directories (mode 0755)
	// Exclusive fails with ErrExists when the file already exists.
	Exclusive bool
}

// WriteResult is what a write returns.
type WriteResult struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Created bool   `json:"created"`
}

// checkQuota fails with a *QuotaError when growing usage by addBytes and
// addEntries, or a file to fileSize bytes, would break a limit.
func (t *Tx) checkQuota(addBytes, addEntries, oldFileSize, fileSize int64) error {
	return t.checkQuotaUnique(addBytes, addBytes, addEntries, oldFileSize, fileSize)
}

// checkQuotaUnique is checkQuota for a change that adds addUnique bytes
// of new content at most (a copy adds none): what max_size_mb counts in
// QuotaUnique mode. Unique bytes never exceed logical ones, so the walk
// that counts them runs only when the logical size is over the limit.
func (t *Tx) checkQuotaUnique(addBytes, addUnique, addEntries, oldFileSize, fileSize int64) error {
	if fileSize > oldFileSize && fileSize > t.s.maxFileSize {
		return &QuotaError{Limit: "max_file_size", Max: t.s.maxFileSize, Current: oldFileSize, Requested: fileSize}
	}
	// Limits are at most MaxQuotaMB<<20 (2^60) and MaxQuotaFiles (2^60)
	// (Quota.Validate), and usage and growth are sizes of real data, so
	// comparing by subtraction cannot overflow.
	q := t.v.quota
	if q.MaxFileSizeMB != nil && fileSize > oldFileSize && fileSize > *q.MaxFileSizeMB<<20 {
		return &QuotaError{Limit: "max_file_size_mb", Max: *q.MaxFileSizeMB, Current: oldFileSize, Requested: fileSize}
	}
	// Past the limit in logical bytes (unique ones cannot be over it
	// otherwise): a logical quota refuses growth; a unique one counts.
	if q.MaxSizeMB != nil && (addBytes > 0 || addUnique > 0) && addBytes > *q.MaxSizeMB<<20-t.v.bytes {
		mode, err := t.quotaMode()
		if err != nil {
			return err
		}
		switch {
		case mode != QuotaUnique:
			// No growth is allowed even over a lowered limit.
			if addBytes > 0 {
				return &QuotaError{Limit: "max_size_mb", Max: *q.MaxSizeMB, Current: t.v.bytes, Requested: t.v.bytes + addBytes, Mode: QuotaLogical}
			}
		case addUnique > 0:
			limit := *q.MaxSizeMB << 20
			u, ok := t.uniqueBound()
			if !ok || addUnique > limit-u {
				// The bound is not enough: count exactly.
				if u, err = t.storedBytes(); err != nil {
					return err
				}
			}
			if addUnique > limit-u {
				return &QuotaError{Limit: "max_size_mb", Max: *q.MaxSizeMB, Current: u, Requested: u + addUnique, Mode: QuotaUnique}
			}
			ub := u + addUnique
			t.uniq = &ub
		}
	}
	used := t.v.files + t.v.dirs
	if q.MaxFiles != nil && addEntries > 0 && addEntries > *q.MaxFiles-used {
		return &QuotaError{Limit: "max_files", Max: *q.MaxFiles, Current: used, Requested: used + addEntries}
	}
	return nil
}

// mkdirAll creates the directories of comps that found, the prefix of a
// walk of comps (or of a longer path) by walkPrefix, lacks, and returns the
// chain. Before it creates the first one it checks the quota for all of
// them plus the addBytes and addEntries its caller will add below them, so
// that a quota error describes the whole request, not the directory it
// stopped at.
func (t *Tx) mkdirAll(op, p string, comps []string, mode fs.FileMode, addBytes, addEntries int64, found []*node) ([]*node, error) {
	chain := make([]*node, 0, len(comps)+1)
	chain = append(chain, found[:min(len(found), len(comps)+1)]...)
	checkedQuota := false
	for i := len(chain) - 1; i < len(comps); i++ {
		if chain[i].kind != KindDir {
			return nil, pathErr(op, p, ErrNotDir)
		}
		if !checkedQuota {
			if err := t.checkQuota(addBytes, int64(len(comps)-i)+addEntries, 0, addBytes); err != nil {
				return nil, pathErr(op, p, err)
			}
			checkedQuota = true
		}
		n, err := t.create(op, JoinPath(comps[:i+1]), chain, comps[:i], comps[i], t.newNode(KindDir, ModeBits(mode)))
		if err != nil {
			return nil, err
		}
		chain = append(chain, n)
	}
	return chain, nil
}

// newNode is a new entry of kind k and mode bits mode, owned by the
// transaction's owner (AsOwner); create gives it the group of a setgid
// directory.
func (t *Tx) newNode(k Kind, mode uint32) *node {
	n := &node{kind: k, mode: mode, uid: NoOwner, gid: NoOwner, nlink: 1, fresh: true}
	if t.hasOwner {
		n.uid, n.gid = t.owner[0], t.owner[1]
	}
	if k == KindDir {
		n.nlink = 2
	}
	return n
}

// create adds n as entry name of the directory at the end of parent (whose
// path components are pcomps), after the quota check.
func (t *Tx) create(op, p string, parent []*node, pcomps []string, name string, n *node) (*node, error) {
	return t.createAt(op, p, parent, pcomps, name, n, t.now)
}

// createAt is create with n's mtime set to mtime (nanoseconds).
func (t *Tx) createAt(op, p string, parent []*node, pcomps []string, name string, n *node, mtime int64) (*node, error) {
	var addBytes int64
	if n.kind == KindFile {
		addBytes = n.size
	}
	addUnique := addBytes
	if t.copying {
		addUnique = 0 // a copy shares its source's chunks
	}
	if err := t.checkQuotaUnique(addBytes, addUnique, 1, 0, addBytes); err != nil {
		return nil, pathErr(op, p, err)
	}
	if err := t.makeWritable(parent, pcomps); err != nil {
		return nil, err
	}
	dir := parent[len(parent)-1]
	if n.fresh {
		if err := t.inherit(dir, n); err != nil {
			return nil, err
		}
	}
	n.ino, n.mtime, n.ctime = t.newIno(), mtime, t.now
	if t.modified != 0 && n.kind == KindFile {
		// Created with content written at t.modified (AtTimes): the
		// file's times are its content's; its directory's stay t.now.
		n.mtime, n.ctime = t.modified, t.modified
	}
	if n.atime == 0 {
		n.atime = t.now
	}
	if _, err := t.insertNode(n); err != nil {
		return nil, err
	}
	if err := t.link(dir.id, name, n.id); err != nil {
		return nil, err
	}
	var subdirs int64
	if n.kind == KindDir {
		subdirs = 1
	}
	if err := t.touchDirLinks(dir, subdirs); err != nil {
		return nil, err
	}
	switch n.kind {
	case KindDir:
		t.v.dirs++
	case KindFile:
		t.v.files++
		t.v.bytes += n.size
	default:
		t.v.files++
	}
	return n, nil
}

// inherit gives new node n the group of directory dir if dir is setgid
// (see Inherit).
func (t *Tx) inherit(dir, n *node) error {
	mode, gid := dir.mode, dir.gid
	if dir.partial {
		if err := t.row(`SELECT mode, gid FROM nodes WHERE id=?`, dir.id).Scan(&mode, &gid); err != nil {
			return fmt.Errorf("load node %d: %w", dir.id, mapSQLErr(err))
		}
	}
	m, g := Inherit(FileMode(mode), gid, n.kind, FileMode(n.mode), n.gid)
	n.mode, n.gid = ModeBits(m), g
	return nil
}

// WriteFile writes data to the file at p, creating it if needed.
func (t *Tx) WriteFile(p string, data []byte, o WriteOptions) (WriteResult, error) {
	size := func(old int64) int64 {
		if o.Append {
			return old + int64(len(data))
		}
		return int64(len(data))
	}
	whole := data // the whole new content, for the search index
	if o.Append {
		whole = nil
	}
	return t.putFile(p, o, whole, size, func(n *node, existed bool) error {
		if o.Append && existed {
			return t.rewrite(n, n.size, data, n.size+int64(len(data)))
		}
		list, err := t.storeContent(data)
		n.chunks, n.size, n.lazy = list, int64(len(data)), false
		return err
	})
}

// putFile creates or changes the file at p: size gives its new size
// from its old one (0 for a new file), set stores its content in n (the
// new node, or the existing one made writable; existed tells which),
// after the quota allowed that size. whole is the file's whole new
// content when the caller has it (the search index then need not read it
// back), else nil.
func (t *Tx) putFile(p string, o WriteOptions, whole []byte, size func(old int64) int64, set func(n *node, existed bool) error) (WriteResult, error) {
	const op = "write"
	comps, err := CleanPath(p)
	if err != nil {
		return WriteResult{}, err
	}
	if len(comps) == 0 {
		return WriteResult{}, pathErr(op, p, ErrIsDir)
	}
	// One walk finds the parent and the file itself.
	all, err := t.walkPrefix(comps)
	if err != nil {
		return WriteResult{}, err
	}
	exists := len(all) == len(comps)+1
	var parent []*node
	if o.Parents {
		parent, err = t.mkdirAll(op, p, comps[:len(comps)-1], 0o755, size(0), 1, all)
	} else {
		parent, err = resolved(op, p, all, len(comps)-1)
	}
	if err != nil {
		return WriteResult{}, err
	}
	dir := parent[len(parent)-1]
	if dir.kind != KindDir {
		return WriteResult{}, pathErr(op, p, ErrNotDir)
	}
	name := comps[len(comps)-1]
	clean := JoinPath(comps)
	if !exists {
		mode := ModeBits(o.Mode)
		if mode == 0 {
			mode = 0o644
		}
		newSize := size(0)
		if err := t.checkQuota(newSize, 1, 0, newSize); err != nil {
			return WriteResult{}, pathErr(op, clean, err)
		}
		n := t.newNode(KindFile, mode)
		n.size = newSize
		if err := set(n, false); err != nil {
			return WriteResult{}, err
		}
		n, err := t.create(op, clean, parent, comps[:len(comps)-1], name, n)
		if err != nil {
			return WriteResult{}, err
		}
		if err := t.recordVersion(clean, n.id, whole); err != nil {
			return WriteResult{}, err
		}
		t.audit("file.write", clean, map[string]any{"size": n.size, "created": true})
		return WriteResult{Path: clean, Size: n.size, Created: true}, nil
	}
	if o.Exclusive {
		return WriteResult{}, pathErr(op, clean, ErrExists)
	}
	// A name of a hard-linked inode: the write goes to the inode.
	chain, icomps, err := t.deref(op, clean, append(parent, all[len(comps)]), comps)
	if err != nil {
		return WriteResult{}, err
	}
	n := chain[len(chain)-1]
	switch n.kind {
	case KindFile:
	case KindDir:
		return WriteResult{}, pathErr(op, clean, ErrIsDir)
	default:
		return WriteResult{}, pathErr(op, clean, fmt.Errorf("is a %s: %w", n.kind, ErrInvalidArgument))
	}
	newSize := size(n.size)
	err = t.changeFile(op, clean, chain, icomps, newSize, newSize, func(n *node) error {
		if o.Mode != 0 {
			n.mode = ModeBits(o.Mode)
		}
		return set(n, true)
	})
	if err != nil {
		return WriteResult{}, err
	}
	if whole != nil {
		t.noteIndex(chain[len(chain)-1].id, whole)
	}
	t.audit("file.write", clean, map[string]any{"size": newSize, "append": o.Append})
	return WriteResult{Path: clean, Size: newSize, Created: false}, nil
}

// changeFile applies fn to the file at the end of chain after checking that
// its new size, and at most newContent bytes of new content (what the
// unique quota mode counts), fit the quota, then stores it.
func (t *Tx) changeFile(op, p string, chain []*node, comps []string, newSize, newContent int64, fn func(n *node) error) error {
	n := chain[len(chain)-1]
	if err := t.checkQuotaUnique(newSize-n.size, newContent, 0, n.size, newSize); err != nil {
		return pathErr(op, p, err)
	}
	if err := t.makeWritable(chain, comps); err != nil {
		return err
	}
	n = chain[len(chain)-1]
	oldSize := n.size
	if err := fn(n); err != nil {
		return err
	}
	n.mtime, n.ctime = t.now, t.now
	if t.modified != 0 {
		n.mtime = t.modified
	}
	t.v.bytes += n.size - oldSize
	if err := t.updateNode(n); err != nil {
		return err
	}
	return t.recordVersion(p, n.id, nil)
}

// fileChain resolves p and checks that it is a regular file: comps are
// p's, chain and icomps the file's (of a hard-linked file, its inode's,
// see resolveInode).
func (t *Tx) fileChain(op, p string) (comps []string, chain []*node, icomps []string, err error) {
	comps, chain, icomps, err = t.resolveInode(op, p)
	if err != nil {
		return nil, nil, nil, err
	}
	switch k := chain[len(chain)-1].kind; k {
	case KindFile:
	case KindDir:
		return nil, nil, nil, pathErr(op, p, ErrIsDir)
	default:
		return nil, nil, nil, pathErr(op, p, fmt.Errorf("is a %s: %w", k, ErrInvalidArgument))
	}
	return comps, chain, icomps, nil
}

// WriteAt writes data at offset off of the existing file p, rewriting only
// the chunks it touches.
func (t *Tx) WriteAt(p string, off int64, data []byte) (WriteResult, error) {
	const op = "write"
	if off < 0 {
		return WriteResult{}, pathErr(op, p, ErrInvalidArgument)
	}
	comps, chain, icomps, err := t.fileChain(op, p)
	if err != nil {
		return WriteResult{}, err
	}
	size := max(chain[len(chain)-1].size, off+int64(len(data)))
	clean := JoinPath(comps)
	// New content: the chunks the data touches.
	var touched int64
	if len(data) > 0 {
		touched = min(size, ((off+int64(len(data))-1)/ChunkSize-off/ChunkSize+1)*ChunkSize)
	}
	if err := t.changeFile(op, clean, chain, icomps, size, touched, func(n *node) error { return t.rewrite(n, off, data, size) }); err != nil {
		return WriteResult{}, err
	}
	t.audit("file.write", clean, map[string]any{"size": size, "offset": off, "length": len(data)})
	return WriteResult{Path: clean, Size: size}, nil
}

// Truncate sets the size of file p, cutting it or extending it with zeros.
func (t *Tx) Truncate(p string, size int64) error {
	const op = "truncate"
	if size < 0 {
		return pathErr(op, p, ErrInvalidArgument)
	}
	comps, chain, icomps, err := t.fileChain(op, p)
	if err != nil {
		return err
	}
	clean := JoinPath(comps)
	// New content: at most the last chunk, cut or padded (a hole is free).
	if err := t.changeFile(op, clean, chain, icomps, size, min(size, ChunkSize), func(n *node) error { return t.rewrite(n, 0, nil, size) }); err != nil {
		return err
	}
	t.audit("file.truncate", clean, map[string]any{"size": size})
	return nil
}

// ReadFile returns the content of file p.
func (t *Tx) ReadFile(p string) ([]byte, Entry, error) {
	comps, chain, _, err := t.fileChain("read", p)
	if err != nil {
		return nil, Entry{}, err
	}
	n := chain[len(chain)-1]
	data, err := t.content(n)
	return data, n.entry(nameOf(comps), JoinPath(comps)), err
}

// ReadAt reads file p at off into buf; n < len(buf) at end of file.
func (t *Tx) ReadAt(p string, off int64, buf []byte) (int, error) {
	if off < 0 {
		return 0, pathErr("read", p, ErrInvalidArgument)
	}
	_, chain, _, err := t.fileChain("read", p)
	if err != nil {
		return 0, err
	}
	return t.readAt(chain[len(chain)-1], off, buf)
}

func nameOf(comps []string) string {
	if len(comps) == 0 {
		return "/"
	}
	return comps[len(comps)-1]
}

// Stat describes the entry at p without following a final symlink.
func (t *Tx) Stat(p string) (Entry, error) {
	comps, chain, _, err := t.resolveInode("stat", p)
	if err != nil {
		return Entry{}, err
	}
	return chain[len(chain)-1].entry(nameOf(comps), JoinPath(comps)), nil
}

// ReadDir lists directory p, sorted by name.
func (t *Tx) ReadDir(p string) ([]Entry, error) {
	comps, chain, err := t.resolve("readdir", p)
	if err != nil {
		return nil, err
	}
	dir := chain[len(chain)-1]
	if dir.kind != KindDir {
		return nil, pathErr("readdir", p, ErrNotDir)
	}
	return t.list(dir.id, JoinPath(comps))
}

// list lists directory dir, whose path is base; the hidden directory of
// hard-linked inodes is left out, and a stub shows its inode.
func (t *Tx) list(dir int64, base string) ([]Entry, error) {
	rows, err := t.query(`SELECT d.name, n.ino, n.kind, n.mode, n.size, n.mtime, n.ctime, n.target, n.uid, n.gid, n.rdev, n.atime, n.nlink FROM dirents d JOIN nodes n ON n.id = d.child WHERE d.dir=? AND d.name != ? ORDER BY d.name`, dir, linksName)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	var out []Entry
	var stubs []int
	var targets []string
	for rows.Next() {
		var name string
		n := &node{}
		if err := rows.Scan(&name, &n.ino, &n.kind, &n.mode, &n.size, &n.mtime, &n.ctime, &n.target, &n.uid, &n.gid, &n.rdev, &n.atime, &n.nlink); err != nil {
			rows.Close()
			return nil, err
		}
		if n.kind == kindLink {
			stubs, targets = append(stubs, len(out)), append(targets, n.target)
		}
		out = append(out, n.entry(name, joinChild(base, name)))
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(stubs) == 0 {
		return out, err
	}
	links, err := t.linksOf(t.v.root)
	if err != nil {
		return nil, err
	}
	for i, at := range stubs {
		in, err := t.inodeNode(links, &node{target: targets[i]})
		if err != nil {
			return nil, err
		}
		out[at] = asInode(out[at], in)
	}
	return out, nil
}

func joinChild(base, name string) string {
	if base == "/" {
		return "/" + name
	}
	return base + "/" + name
}

// Mkdir creates directory p; with parents, missing parents too and an
// existing directory at p is not an error.
func (t *Tx) Mkdir(p string, mode fs.FileMode, parents bool) error {
	const op = "mkdir"
	if mode == 0 {
		mode = 0o755
	}
	comps, err := CleanPath(p)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		if parents {
			return nil
		}
		return pathErr(op, p, ErrExists)
	}
	clean := JoinPath(comps)
	if parents {
		before := t.v.dirs
		found, err := t.walkPrefix(comps)
		if err != nil {
			return err
		}
		chain, err := t.mkdirAll(op, clean, comps, mode, 0, 0, found)
		if err != nil {
			return err
		}
		// mkdirAll accepts any existing last entry; mkdir -p does not
		// accept a file or symlink there.
		if chain[len(chain)-1].kind != KindDir {
			return pathErr(op, clean, ErrExists)
		}
		if t.v.dirs != before {
			t.audit("dir.create", clean, map[string]any{"parents": true})
		}
		return nil
	}
	_, parent, existing, err := t.entryOf(op, clean)
	if err != nil {
		return err
	}
	name := comps[len(comps)-1]
	if existing != nil {
		return pathErr(op, clean, ErrExists)
	}
	if _, err := t.create(op, clean, parent, comps[:len(comps)-1], name, t.newNode(KindDir, ModeBits(mode))); err != nil {
		return err
	}
	t.audit("dir.create", clean, nil)
	return nil
}

// Symlink creates a symlink at p pointing at target. The target is stored
// verbatim; vault paths never follow it.
func (t *Tx) Symlink(target, p string) error {
	const op = "symlink"
	if target == "" || len(target) > MaxPathLen {
		return pathErr(op, p, ErrInvalidArgument)
	}
	n := t.newNode(KindSymlink, 0o777)
	n.size, n.target = int64(len(target)), target
	clean, err := t.createNew(op, p, n)
	if err != nil {
		return err
	}
	t.audit("symlink.create", clean, map[string]any{"target": target})
	return nil
}

// createNew creates n at p, which must not exist, and returns p cleaned.
func (t *Tx) createNew(op, p string, n *node) (string, error) {
	comps, parent, existing, err := t.entryOf(op, p)
	if err != nil {
		return "", err
	}
	clean, name := JoinPath(comps), comps[len(comps)-1]
	if existing != nil {
		return "", pathErr(op, clean, ErrExists)
	}
	_, err = t.create(op, clean, parent, comps[:len(comps)-1], name, n)
	return clean, err
}

// Mknod creates a fifo, socket or device node of kind k at p, with mode
// bits mode and, for a device, device number rdev.
func (t *Tx) Mknod(p string, k Kind, mode fs.FileMode, rdev uint64) error {
	const op = "mknod"
	if !k.special() {
		return pathErr(op, p, fmt.Errorf("cannot make a %s node: %w", k, ErrInvalidArgument))
	}
	n := t.newNode(k, ModeBits(mode))
	if k == KindCharDev || k == KindBlkDev {
		n.rdev = int64(rdev)
	}
	clean, err := t.createNew(op, p, n)
	if err != nil {
		return err
	}
	t.audit("node.create", clean, map[string]any{"type": k.String(), "mode": fmt.Sprintf("%04o", n.mode), "rdev": rdev})
	return nil
}

// RemoveOptions tune Remove.
type RemoveOptions struct {
	Recursive bool // remove a non-empty directory and everything below it
	DirOnly   bool // rmdir: fail with ErrNotDir on a non-directory
	FileOnly  bool // unlink: fail with ErrIsDir on a directory
}

// Remove deletes the entry at p.
func (t *Tx) Remove(p string, o RemoveOptions) error {
	const op = "remove"
	comps, chain, err := t.resolve(op, p)
	if err != nil {
		return err
	}
	clean := JoinPath(comps)
	if len(comps) == 0 {
		return pathErr(op, clean, fmt.Errorf("cannot remove the root: %w", ErrInvalidArgument))
	}
	n := chain[len(chain)-1]
	switch {
	case n.kind == KindDir && o.FileOnly:
		return pathErr(op, clean, ErrIsDir)
	case n.kind != KindDir && o.DirOnly:
		return pathErr(op, clean, ErrNotDir)
	}
	if n.kind == KindDir && !o.Recursive {
		var one int
		err := t.row(`SELECT count(*) FROM (SELECT 1 FROM dirents WHERE dir=? LIMIT 1)`, n.id).Scan(&one)
		if err != nil {
			return mapSQLErr(err)
		}
		if one > 0 {
			return pathErr(op, clean, ErrNotEmpty)
		}
	}
	parent := chain[:len(chain)-1]
	if err := t.makeWritable(parent, comps[:len(comps)-1]); err != nil {
		return err
	}
	dir := parent[len(parent)-1]
	if err := t.unlink(dir.id, comps[len(comps)-1]); err != nil {
		return err
	}
	if err := t.drop(n); err != nil {
		return err
	}
	if err := t.touchDirLinks(dir, -subdir(n)); err != nil {
		return err
	}
	kind := n.kind
	if kind == kindLink {
		kind = KindFile // the inode may be gone now; a hard link is nearly always a file's
	}
	t.audit("remove", clean, map[string]any{"type": kind.String(), "recursive": o.Recursive})
	return nil
}

// RenameOptions tune Rename.
type RenameOptions struct {
	NoReplace bool // fail with ErrExists when dst exists
	// Exchange swaps src and dst, which must both exist, atomically
	// (renameat2's RENAME_EXCHANGE).
	Exchange bool
	// Ctime sets the change time of the entry moved, as link(2) of dst
	// followed by unlink(2) of src leaves it (a rename leaves it alone):
	// a mount commits that pair, made in one burst, as a rename.
	Ctime bool
}

// Rename moves src to dst with POSIX semantics: an existing dst file is
// replaced, an existing dst directory only when empty and src is one too.
func (t *Tx) Rename(src, dst string, o RenameOptions) error {
	const op = "rename"
	scomps, schain, err := t.resolve(op, src)
	if err != nil {
		return err
	}
	// (The destination's parent chain is walked again after the unlink,
	// which may have changed it.)
	dcomps, _, victim, err := t.entryOf(op, dst)
	if err != nil {
		return err
	}
	if len(scomps) == 0 {
		return pathErr(op, src, fmt.Errorf("cannot move the root: %w", ErrInvalidArgument))
	}
	sclean, dclean := JoinPath(scomps), JoinPath(dcomps)
	if sclean == dclean {
		return nil
	}
	if len(dcomps) > len(scomps) && JoinPath(dcomps[:len(scomps)]) == sclean {
		return pathErr(op, dst, fmt.Errorf("cannot move a directory into itself: %w", ErrInvalidArgument))
	}
	if o.Exchange && len(scomps) > len(dcomps) && JoinPath(scomps[:len(dcomps)]) == dclean {
		return pathErr(op, src, fmt.Errorf("cannot move a directory into itself: %w", ErrInvalidArgument))
	}
	n := schain[len(schain)-1]
	dname := dcomps[len(dcomps)-1]
	if o.Exchange {
		return t.exchange(op, sclean, dclean, scomps, dcomps, n, victim)
	}
	if victim != nil {
		if o.NoReplace {
			return pathErr(op, dclean, ErrExists)
		}
		if n.kind == kindLink && victim.kind == kindLink && n.target == victim.target {
			// Two names of one inode: rename(2) does nothing.
			return nil
		}
		switch {
		case victim.kind == KindDir && n.kind != KindDir:
			return pathErr(op, dclean, ErrIsDir)
		case victim.kind != KindDir && n.kind == KindDir:
			return pathErr(op, dclean, ErrNotDir)
		case victim.kind == KindDir:
			ds, err := t.dirents(victim.id)
			if err != nil {
				return err
			}
			if len(ds) > 0 {
				return pathErr(op, dclean, ErrNotEmpty)
			}
		}
	}
	// Unlink from the source parent first, then resolve the destination
	// parent again: both may share ancestors that makeWritable copies.
	sparent := schain[:len(schain)-1]
	if err := t.makeWritable(sparent, scomps[:len(scomps)-1]); err != nil {
		return err
	}
	if err := t.unlink(sparent[len(sparent)-1].id, scomps[len(scomps)-1]); err != nil {
		return err
	}
	if err := t.touchDirLinks(sparent[len(sparent)-1], -subdir(n)); err != nil {
		return err
	}
	dparent, err := t.walk(op, dst, dcomps[:len(dcomps)-1])
	if err != nil {
		return err
	}
	if err := t.makeWritable(dparent, dcomps[:len(dcomps)-1]); err != nil {
		return err
	}
	ddir := dparent[len(dparent)-1]
	subdirs := subdir(n)
	if victim != nil {
		if err := t.drop(victim); err != nil {
			return err
		}
		subdirs -= subdir(victim)
	}
	if o.Ctime {
		if n, err = t.changed(n); err != nil {
			return err
		}
	}
	if err := t.link(ddir.id, dname, n.id); err != nil {
		return err
	}
	if err := t.touchDirLinks(ddir, subdirs); err != nil {
		return err
	}
	t.audit("rename", sclean, map[string]any{"to": dclean})
	return nil
}

// changed sets the change time of n, an entry no name links to for the
// moment (a rename's), and returns the node to link in its place: n, or
// its copy if n was frozen. Of a stub, the inode changes.
func (t *Tx) changed(n *node) (*node, error) {
	if n.kind == kindLink {
		ichain, icomps, err := t.inodeOf("rename", "", n)
		if err != nil {
			return nil, err
		}
		if err := t.makeWritable(ichain, icomps); err != nil {
			return nil, err
		}
		return n, t.addLinks(ichain[2], 0)
	}
	if !t.owned(n) {
		c, err := t.insertCopy(n)
		if err != nil {
			return nil, err
		}
		if n.kind == KindDir {
			if _, err := t.exec(`INSERT INTO dirents(dir, name, child) SELECT ?, name, child FROM dirents WHERE dir=?`, c.id, n.id); err != nil {
				return nil, fmt.Errorf("copy directory: %w", err)
			}
		}
		n = c
	}
	n.ctime = t.now
	if _, err := t.exec(`UPDATE nodes SET ctime=? WHERE id=?`, n.ctime, n.id); err != nil {
		return nil, fmt.Errorf("update node: %w", err)
	}
	return n, nil
}

// Copy copies src to dst. Content is shared, not copied: the new files
// point at the same chunks. A directory needs recursive.
func (t *Tx) Copy(src, dst string, recursive bool) error {
	const op = "copy"
	scomps, schain, err := t.resolve(op, src)
	if err != nil {
		return err
	}
	n := schain[len(schain)-1]
	if n.kind == KindDir && !recursive {
		return pathErr(op, src, ErrIsDir)
	}
	dcomps, dparent, existing, err := t.entryOf(op, dst)
	if err != nil {
		return err
	}
	sclean, dclean := JoinPath(scomps), JoinPath(dcomps)
	if len(dcomps) >= len(scomps) && JoinPath(dcomps[:len(scomps)]) == sclean {
		return pathErr(op, dst, fmt.Errorf("cannot copy a directory into itself: %w", ErrInvalidArgument))
	}
	dname := dcomps[len(dcomps)-1]
	if existing != nil {
		return pathErr(op, dclean, ErrExists)
	}
	// Check the quota for the whole copy up front, so that the error
	// describes the request, not the entry the copy would have stopped at.
	entries, bytes, largest, err := t.treeUsage(n.id)
	if err != nil {
		return err
	}
	// A copy shares its source's chunks: it adds no unique bytes.
	if err := t.checkQuotaUnique(bytes, 0, entries, 0, largest); err != nil {
		return pathErr(op, dclean, err)
	}
	t.copying = true
	err = t.copyTree(op, dclean, n, dparent, dcomps[:len(dcomps)-1], dname, nil)
	t.copying = false
	if err != nil {
		return err
	}
	t.audit("copy", sclean, map[string]any{"to": dclean})
	return nil
}

// treeUsage is what the subtree at node id counts against quotas: its
// entries, its files' bytes and its largest file.
// A hard link copies as a file of its own: it counts its inode's size.
func (t *Tx) treeUsage(id int64) (entries, bytes, largest int64, err error) {
	links, err := t.linksOf(t.v.root)
	if err != nil {
		return 0, 0, 0, err
	}
	err = t.row(fmt.Sprintf(reachableSQL, `SELECT ?1`)+
		`, f(size) AS (SELECT CASE WHEN n.kind = ?2 THEN n.size WHEN n.kind = ?3 THEN (SELECT i.size FROM dirents l JOIN nodes i ON i.id = l.child WHERE l.dir = ?4 AND l.name = n.target AND i.kind = ?2) END FROM nodes n JOIN live ON n.id = live.id)`+
		` SELECT count(*), coalesce(sum(size), 0), coalesce(max(size), 0) FROM f`,
		id, KindFile, kindLink, links).Scan(&entries, &bytes, &largest)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("copy: usage: %w", mapSQLErr(err))
	}
	return entries, bytes, largest, nil
}

// copyTree copies the subtree at n as entry name of the directory at the
// end of parent (whose path components are pcomps), at path p: new nodes,
// new inode numbers, content shared. each, if not nil, runs for every
// copy c of a node src, after it is linked.
func (t *Tx) copyTree(op, p string, n *node, parent []*node, pcomps []string, name string, each func(p string, src, c *node) error) error {
	if n.kind == kindLink {
		// A copy of a hard-linked file is a file of its own.
		in, err := t.inodeNode(0, n)
		if err != nil {
			return err
		}
		n = in
	}
	if err := t.loadChunks(n); err != nil {
		return err
	}
	c := &node{kind: n.kind, mode: n.mode, size: n.size, target: n.target, chunks: n.chunks,
		uid: n.uid, gid: n.gid, rdev: n.rdev, atime: n.atime, nlink: 1}
	if n.kind == KindDir {
		c.nlink = 2 // create counts the subdirectories as it copies them
	}
	c, err := t.create(op, p, parent, pcomps, name, c)
	if err != nil {
		return err
	}
	if each != nil {
		if err := each(p, n, c); err != nil {
			return err
		}
	}
	if n.kind != KindDir {
		return nil
	}
	ds, err := t.dirents(n.id)
	if err != nil {
		return err
	}
	sub := append(append([]*node{}, parent...), c)
	subComps := append(append([]string{}, pcomps...), name)
	for _, d := range ds {
		child, err := t.node(d.child)
		if err != nil {
			return err
		}
		if err := t.copyTree(op, joinChild(p, d.name), child, sub, subComps, d.name, each); err != nil {
			return err
		}
	}
	return nil
}

// subdir is 1 for a directory, 0 for anything else: what n adds to its
// parent's link count.
func subdir(n *node) int64 {
	if n.kind == KindDir {
		return 1
	}
	return 0
}

// SetAttr changes the mode bits and/or mtime of the entry at p; nil
// fields are left alone.
func (t *Tx) SetAttr(p string, mode *fs.FileMode, mtime *time.Time) (Entry, error) {
	return t.SetAttrs(p, Attrs{Mode: mode, Mtime: mtime})
}

// Attrs are the attributes SetAttrs changes; nil fields are left alone.
type Attrs struct {
	Mode         *fs.FileMode // permissions, ModeSetuid, ModeSetgid, ModeSticky
	Mtime, Atime *time.Time
	// Uid and Gid change the owner. As chown(2) on Linux, a change of
	// owner or group of a non-directory clears its setuid bit, and its
	// setgid bit if it is group-executable; Mode, if also given, is
	// applied after. Who may change owners is the caller's to check (the
	// kernel does for a mount).
	Uid, Gid *int64
	// Accessed marks an Atime change made because the entry was read
	// (relatime): it leaves the change time alone and is not audited.
	Accessed bool
}

// Relatime reports whether a read at now updates an access time atime,
// as Linux's relatime does: when the last access is not later than the
// last modification or change, or a day old.
func Relatime(atime, mtime, ctime, now time.Time) bool {
	return !atime.After(mtime) || !atime.After(ctime) || now.Sub(atime) >= 24*time.Hour
}

// SetAttrs changes the attributes of the entry at p. Every change sets
// the change time.
func (t *Tx) SetAttrs(p string, a Attrs) (Entry, error) {
	const op = "setattr"
	comps, chain, icomps, err := t.resolveInode(op, p)
	if err != nil {
		return Entry{}, err
	}
	if err := t.makeWritable(chain, icomps); err != nil {
		return Entry{}, err
	}
	n := chain[len(chain)-1]
	details := map[string]any{}
	if a.Uid != nil || a.Gid != nil {
		if a.Uid != nil {
			n.uid = *a.Uid
			details["uid"] = n.uid
		}
		if a.Gid != nil {
			n.gid = *a.Gid
			details["gid"] = n.gid
		}
		n.mode = ModeBits(ChownedMode(n.kind, FileMode(n.mode)))
	}
	if a.Mode != nil {
		n.mode = ModeBits(*a.Mode)
		details["mode"] = fmt.Sprintf("%04o", n.mode)
	}
	if a.Mtime != nil && a.Atime == nil && n.atime == 0 {
		n.atime = n.mtime // atime 0 reads as mtime: keep the old one
	}
	if a.Mtime != nil {
		n.mtime = a.Mtime.UnixNano()
		details["mtime"] = a.Mtime.UTC().Format(time.RFC3339Nano)
	}
	if a.Atime != nil {
		n.atime = a.Atime.UnixNano()
		details["atime"] = a.Atime.UTC().Format(time.RFC3339Nano)
	}
	accessOnly := a.Accessed && a.Mode == nil && a.Mtime == nil && a.Uid == nil && a.Gid == nil
	if !accessOnly {
		n.ctime = t.now
	}
	if err := t.updateNode(n); err != nil {
		return Entry{}, err
	}
	clean := JoinPath(comps)
	if !accessOnly {
		t.audit("setattr", clean, details)
	}
	return n.entry(nameOf(comps), clean), nil
}

// Update runs fn in one write transaction on the vault: all of fn's changes
// commit together or not at all.
func (v *Vault) Update(ctx context.Context, meta Meta, fn func(tx *Tx) error) error {
	_, _, err := write(ctx, v.s, v.namespace, v.name, meta, "update", true, func(t *Tx) (struct{}, error) {
		return struct{}{}, fn(t)
	})
	return err
}

// View runs fn in one read transaction: a consistent snapshot.
func (v *Vault) View(ctx context.Context, fn func(tx *Tx) error) error {
	_, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (struct{}, error) { return struct{}{}, fn(t) })
	return err
}

// exchange swaps the entries at src and dst, n and other (Rename with
// Exchange): both names stay, each naming what the other did.
func (t *Tx) exchange(op, sclean, dclean string, scomps, dcomps []string, n, other *node) error {
	if other == nil {
		return pathErr(op, dclean, ErrNotFound)
	}
	// Both parents writable; once one is, the ancestors it shares with
	// the other are owned and stay as they are.
	sp, err := t.walk(op, sclean, scomps[:len(scomps)-1])
	if err != nil {
		return err
	}
	if err := t.makeWritable(sp, scomps[:len(scomps)-1]); err != nil {
		return err
	}
	dp, err := t.walk(op, dclean, dcomps[:len(dcomps)-1])
	if err != nil {
		return err
	}
	if err := t.makeWritable(dp, dcomps[:len(dcomps)-1]); err != nil {
		return err
	}
	sdir, ddir := sp[len(sp)-1], dp[len(dp)-1]
	if err := t.link(sdir.id, scomps[len(scomps)-1], other.id); err != nil {
		return err
	}
	if err := t.link(ddir.id, dcomps[len(dcomps)-1], n.id); err != nil {
		return err
	}
	if sdir.id == ddir.id {
		if err := t.touchDir(sdir); err != nil {
			return err
		}
	} else {
		d := subdir(other) - subdir(n)
		if err := t.touchDirLinks(sdir, d); err != nil {
			return err
		}
		if err := t.touchDirLinks(ddir, -d); err != nil {
			return err
		}
	}
	t.audit("rename", sclean, map[string]any{"to": dclean, "exchange": true})
	return nil
}

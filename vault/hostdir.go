package vault

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// HostDirStats counts what ImportDir or ExportDir copied.
type HostDirStats struct {
	Files int64 `json:"files"` // regular files and symlinks
	Dirs  int64 `json:"dirs"`
	Bytes int64 `json:"bytes"` // content of regular files
}

// hostEntry is one entry of a host tree, as the one walk of ImportDir
// found it; data and hashes are filled in by a reader.
type hostEntry struct {
	rel    string // slash-separated, relative to the host root; "." is the root
	kind   Kind
	mode   fs.FileMode
	mtime  int64
	size   int64
	target string

	data   []byte
	hashes []byte
	err    error
	done   chan struct{}
}

// importReadAhead bounds the files read and hashed ahead of the writer.
const importReadAhead = 64

// scanHostDir walks root once, without reading contents. Sockets, devices
// and fifos are skipped: they have no place in a vault.
func scanHostDir(root string) ([]*hostEntry, HostDirStats, error) {
	var out []*hostEntry
	var st HostDirStats
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := &hostEntry{rel: filepath.ToSlash(rel), mode: info.Mode().Perm(), mtime: info.ModTime().UnixNano()}
		switch {
		case d.IsDir():
			e.kind = KindDir
			if e.rel != "." {
				st.Dirs++
			}
		case d.Type()&fs.ModeSymlink != 0:
			if e.target, err = os.Readlink(p); err != nil {
				return err
			}
			e.kind, e.size = KindSymlink, int64(len(e.target))
			st.Files++
		case d.Type().IsRegular():
			e.kind, e.size = KindFile, info.Size()
			st.Files++
			st.Bytes += e.size
		default:
			return nil
		}
		out = append(out, e)
		return nil
	})
	return out, st, err
}

// readHostFiles reads and hashes the regular files of es in parallel, at
// most importReadAhead ahead of the consumer, which calls release after
// each file it is done with. Every file entry's done channel is closed
// eventually, also when ctx ends first (then with err set).
func readHostFiles(ctx context.Context, root string, es []*hostEntry) (release func()) {
	tokens := make(chan struct{}, importReadAhead)
	jobs := make(chan *hostEntry, importReadAhead)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				if ctx.Err() != nil {
					e.err = ctx.Err()
				} else {
					e.data, e.err = os.ReadFile(filepath.Join(root, filepath.FromSlash(e.rel)))
					if e.err == nil {
						e.size = int64(len(e.data)) // the file may have changed since the walk
						e.hashes = hashChunks(e.data)
					}
				}
				close(e.done)
			}
		}()
	}
	for _, e := range es {
		if e.kind == KindFile {
			e.done = make(chan struct{})
		}
	}
	go func() {
		defer close(jobs)
		for _, e := range es {
			if e.kind != KindFile {
				continue
			}
			select {
			case tokens <- struct{}{}:
				jobs <- e
			case <-ctx.Done():
				e.err = ctx.Err()
				close(e.done)
			}
		}
	}()
	return func() { <-tokens }
}

// hashChunks returns the chunk list of data: the hash of each chunk.
func hashChunks(data []byte) []byte {
	list := make([]byte, 0, nchunks(int64(len(data)))*hashLen)
	for off := 0; off < len(data); off += ChunkSize {
		h := sha256.Sum256(data[off:min(off+ChunkSize, len(data))])
		list = append(list, h[:]...)
	}
	return list
}

// storeHashed stores data's chunks under the hashes of list.
func (t *Tx) storeHashed(data, list []byte) error {
	for i := 0; i*ChunkSize < len(data); i++ {
		var h [hashLen]byte
		copy(h[:], list[i*hashLen:])
		if err := t.storeChunk(h, data[i*ChunkSize:min((i+1)*ChunkSize, len(data))]); err != nil {
			return err
		}
	}
	return nil
}

// ImportDir copies the host directory hostDir into the vault at dst (made
// if missing), in one transaction: all of it or, on any failure, nothing.
// It walks hostDir once, reads and hashes files in parallel with the
// writes, and checks the quota for the whole tree before it writes
// anything, so a refusal says how much the import needs. Existing files
// are replaced and existing directories kept. hostDir is a path on the
// machine that runs the call.
func (v *Vault) ImportDir(ctx context.Context, hostDir, dst string, meta Meta) (HostDirStats, error) {
	const op = "import"
	dcomps, err := CleanPath(dst)
	if err != nil {
		return HostDirStats{}, err
	}
	dst = JoinPath(dcomps)
	if fi, err := os.Stat(hostDir); err != nil {
		return HostDirStats{}, fmt.Errorf("import %s: %w", hostDir, ErrNotFound)
	} else if !fi.IsDir() {
		return HostDirStats{}, fmt.Errorf("import %s: %w", hostDir, ErrNotDir)
	}
	es, total, err := scanHostDir(hostDir)
	if err != nil {
		return HostDirStats{}, fmt.Errorf("import %s: %w", hostDir, err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	release := readHostFiles(rctx, hostDir, es)
	st, _, err := write(ctx, v.s, v.namespace, v.name, meta, "file.import_dir", true, func(t *Tx) (HostDirStats, error) {
		if err := t.importQuota(dst, es, total); err != nil {
			return HostDirStats{}, err
		}
		if err := t.Mkdir(dst, 0, true); err != nil {
			return HostDirStats{}, err
		}
		return t.importEntries(op, dst, es, release)
	})
	return st, err
}

// importQuota refuses an import that would break a limit, before it
// writes anything. The first check counts every entry as new; only when
// that fails are the entries that already exist looked up and discounted.
func (t *Tx) importQuota(dst string, es []*hostEntry, total HostDirStats) error {
	var largest int64
	for _, e := range es {
		if e.kind == KindFile {
			largest = max(largest, e.size)
		}
	}
	addBytes, addEntries := total.Bytes, total.Files+total.Dirs
	err := t.checkQuota(addBytes, addEntries, 0, largest)
	var qe *QuotaError
	if errors.As(err, &qe) && qe.Limit != "max_file_size_mb" {
		for _, e := range es {
			old, serr := t.Stat(path.Join(dst, e.rel))
			if serr != nil {
				continue
			}
			addEntries--
			if old.Kind == KindFile {
				addBytes -= old.Size
			}
		}
		err = t.checkQuota(addBytes, addEntries, 0, largest)
	}
	if !errors.As(err, &qe) {
		return err
	}
	switch qe.Limit {
	case "max_size_mb":
		return fmt.Errorf("import of %d bytes into %s needs %d bytes, the vault allows %d bytes (max_size_mb %d) and holds %d: %w",
			total.Bytes, dst, qe.Requested, qe.Max<<20, qe.Max, qe.Current, err)
	case "max_files":
		return fmt.Errorf("import of %d entries into %s needs %d entries, the vault allows %d and holds %d: %w",
			total.Files+total.Dirs, dst, qe.Requested, qe.Max, qe.Current, err)
	default:
		return fmt.Errorf("import into %s: a file of %d bytes, the vault allows %d bytes per file (max_file_size_mb %d): %w",
			dst, qe.Requested, qe.Max<<20, qe.Max, err)
	}
}

// importEntries writes es below dst, in walk order (parents first). Below
// a directory this import created, entries are created directly from the
// directory's node chain; anywhere else they go through WriteFile, Mkdir
// and Symlink, which look up and replace what is there.
func (t *Tx) importEntries(op, dst string, es []*hostEntry, release func()) (HostDirStats, error) {
	var st HostDirStats
	// fresh holds the node chain of each directory this import created:
	// all of its nodes belong to this epoch, so no later change copies
	// them and the chain stays current.
	fresh := map[string][]*node{}
	type dirTime struct {
		p     string
		mtime int64
	}
	var dirs []dirTime
	for _, e := range es {
		p := path.Join(dst, e.rel)
		if e.kind == KindFile {
			<-e.done
			release()
			if e.err != nil {
				return st, fmt.Errorf("import %s: %w", e.rel, e.err)
			}
		}
		if e.rel == "." {
			dirs = append(dirs, dirTime{p, e.mtime})
			continue
		}
		parentPath, name := path.Dir(p), path.Base(p)
		chain, isFresh := fresh[parentPath]
		var n *node
		switch e.kind {
		case KindDir:
			dirs = append(dirs, dirTime{p, e.mtime})
			st.Dirs++
			if isFresh {
				n = &node{kind: KindDir, mode: uint32(e.mode)}
				break
			}
			before := t.v.dirs
			if err := t.Mkdir(p, fs.FileMode(e.mode), true); err != nil {
				return st, err
			}
			if t.v.dirs != before {
				_, c, err := t.resolve(op, p)
				if err != nil {
					return st, err
				}
				fresh[p] = c
			}
			continue
		case KindFile:
			st.Files++
			st.Bytes += e.size
			if isFresh {
				if err := t.storeHashed(e.data, e.hashes); err != nil {
					return st, err
				}
				n = &node{kind: KindFile, mode: uint32(e.mode), size: e.size, chunks: e.hashes}
				break
			}
			if err := replaceable(t, p, false); err != nil {
				return st, err
			}
			if _, err := t.WriteFile(p, e.data, WriteOptions{Mode: e.mode, Parents: true}); err != nil {
				return st, err
			}
		case KindSymlink:
			st.Files++
			if isFresh {
				n = &node{kind: KindSymlink, mode: 0o777, size: e.size, target: e.target}
				break
			}
			if err := replaceable(t, p, true); err != nil {
				return st, err
			}
			if err := t.Symlink(e.target, p); err != nil {
				return st, err
			}
		}
		if n == nil {
			e.data, e.hashes = nil, nil
			mt := time.Unix(0, e.mtime)
			if _, err := t.SetAttr(p, nil, &mt); err != nil {
				return st, err
			}
			continue
		}
		pcomps, _ := CleanPath(parentPath)
		if _, err := t.createAt(op, p, chain, pcomps, name, n, e.mtime); err != nil {
			return st, err
		}
		if n.kind == KindFile {
			// Indexed now, not queued: the queue would hold every
			// file's content until the commit.
			if err := t.recordVersion(p, n.id, e.data); err != nil {
				return st, err
			}
			delete(t.toIndex, n.id)
			if err := t.index(n, e.data); err != nil {
				return st, err
			}
		}
		e.data, e.hashes = nil, nil
		if n.kind == KindDir {
			fresh[p] = append(chain[:len(chain):len(chain)], n)
		}
	}
	// Directory times last: adding entries moved them. Deepest first.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if c, ok := fresh[d.p]; ok {
			if _, err := t.exec(`UPDATE nodes SET mtime=? WHERE id=?`, d.mtime, c[len(c)-1].id); err != nil {
				return st, fmt.Errorf("update node: %w", err)
			}
			continue
		}
		if d.p == "/" {
			continue
		}
		mt := time.Unix(0, d.mtime)
		if _, err := t.SetAttr(d.p, nil, &mt); err != nil {
			return st, err
		}
	}
	t.audit("tree.import", dst, map[string]any{"files": st.Files, "dirs": st.Dirs, "bytes": st.Bytes})
	return st, nil
}

// replaceable removes what is at p unless it is a directory, or, for a
// file, a file (WriteFile replaces those in place); a missing entry is
// fine. A directory where a symlink should go is an error.
func replaceable(t *Tx, p string, symlink bool) error {
	e, err := t.Stat(p)
	if err != nil {
		return nil
	}
	switch {
	case e.Kind == KindDir:
		if symlink {
			return pathErr("import", p, ErrIsDir)
		}
		return nil // WriteFile reports it
	case e.Kind == KindFile && !symlink:
		return nil
	}
	return t.Remove(p, RemoveOptions{FileOnly: true})
}

// ExportDir copies the vault's subtree at src out to the host directory
// hostDir (made if missing): directories, files with their modes and
// times, and symlinks. It reads one consistent snapshot of the vault and
// writes files in parallel. hostDir is a path on the machine that runs the
// call.
func (v *Vault) ExportDir(ctx context.Context, src, hostDir string) (HostDirStats, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (HostDirStats, error) {
		comps, chain, err := t.resolve("export", src)
		if err != nil {
			return HostDirStats{}, err
		}
		top := chain[len(chain)-1]
		if top.kind != KindDir {
			return HostDirStats{}, pathErr("export", JoinPath(comps), ErrNotDir)
		}
		// Made once the source is known to be there: a refused export
		// leaves the host as it was.
		if err := os.MkdirAll(hostDir, 0o755); err != nil {
			return HostDirStats{}, fmt.Errorf("export to %s: %w", hostDir, err)
		}
		return t.exportTree(ctx, top.id, hostDir)
	})
}

// hostFile is a file for the writers of exportTree.
type hostFile struct {
	p     string
	data  []byte
	mode  fs.FileMode
	mtime time.Time
}

func (t *Tx) exportTree(ctx context.Context, root int64, hostDir string) (HostDirStats, error) {
	var st HostDirStats
	files := make(chan hostFile, importReadAhead)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var werr error
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range files {
				if err := WriteHostFile(f.p, f.data, f.mode, f.mtime); err != nil {
					errMu.Lock()
					werr = cmp.Or(werr, err)
					errMu.Unlock()
				}
			}
		}()
	}
	type dirTime struct {
		p     string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirTime
	var walk func(dir int64, hp string) error
	walk = func(dir int64, hp string) error {
		ds, err := t.dirents(dir)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := ctx.Err(); err != nil {
				return err
			}
			if d.name == linksName {
				continue // hard links are exported as copies, under each name
			}
			n, err := t.node(d.child)
			if err != nil {
				return err
			}
			if n.kind == kindLink {
				if n, err = t.inodeNode(0, n); err != nil {
					return err
				}
			}
			p := filepath.Join(hp, d.name)
			mt := time.Unix(0, n.mtime)
			switch n.kind {
			case KindDir:
				if err := HostDirAt(p); err != nil {
					return err
				}
				dirs = append(dirs, dirTime{p, fs.FileMode(n.mode), mt})
				st.Dirs++
				if err := walk(n.id, p); err != nil {
					return err
				}
			case KindSymlink:
				os.Remove(p)
				if err := os.Symlink(n.target, p); err != nil {
					return err
				}
				st.Files++
			case KindFile:
				n.setLazy()
				data, err := t.content(n)
				if err != nil {
					return err
				}
				files <- hostFile{p, data, fs.FileMode(n.mode), mt}
				st.Files++
				st.Bytes += n.size
			}
		}
		return nil
	}
	err := walk(root, hostDir)
	close(files)
	wg.Wait()
	if err == nil {
		err = werr
	}
	if err != nil {
		return st, fmt.Errorf("export to %s: %w", hostDir, err)
	}
	// Directory modes and times last: writing files into them moved their
	// times, and a read-only directory could not have been written into.
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Chmod(dirs[i].p, dirs[i].mode)
		os.Chtimes(dirs[i].p, dirs[i].mtime, dirs[i].mtime)
	}
	return st, nil
}

// An export may go into a directory that holds an earlier export, whose
// symlinks the vault's content chose: HostDirAt and WriteHostFile replace
// whatever is not already a directory or a regular file instead of
// following it, so that nothing is written outside the export.

// HostDirAt makes the host path p a directory, keeping one that is there
// and replacing anything else (a symlink is not followed).
func HostDirAt(p string) error {
	fi, err := os.Lstat(p)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		if err := os.Remove(p); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.Mkdir(p, 0o755)
}

// WriteHostFile writes data to the host path p as a regular file with
// mode and mtime, replacing anything else there (a symlink is not
// followed).
func WriteHostFile(p string, data []byte, mode fs.FileMode, mtime time.Time) error {
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	h, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|oNoFollow, mode)
	if err != nil {
		return err
	}
	_, err = h.Write(data)
	if err == nil {
		err = h.Chmod(mode) // an existing file keeps its mode otherwise
	}
	if cerr := h.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(p, mtime, mtime)
	}
	return err
}

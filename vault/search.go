package vault

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Search: a full-text index (SQLite FTS5) of file contents, kept in the
// transaction of each write. It is keyed by content, not by path: a
// document is the text of one chunk list (its key is the SHA-256 of the
// list, the same hash a Version reports), so forks and checkpoints share
// it and adding a vault costs nothing. A search finds the matching
// documents, then walks the vault's tree for the files that hold them.
// Only UTF-8 text files of at most MaxIndexBytes are indexed.
const searchSchema = `
CREATE TABLE IF NOT EXISTS fts_docs(id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body);
`

// MaxIndexBytes is the largest file the full-text index holds.
const MaxIndexBytes = 1 << 20

// contentKey is the key of a chunk list in the index (and a Version's hash).
func contentKey(chunks []byte) [hashLen]byte { return sha256.Sum256(chunks) }

// isText reports whether data is indexable text: valid UTF-8, no NUL.
func isText(data []byte) bool { return bytes.IndexByte(data, 0) < 0 && utf8.Valid(data) }

// noteIndex queues file node id for the index; flushIndex indexes the
// queue before the transaction commits, so that several writes of one
// file in one transaction index only its final content. data is the
// file's whole content when the caller has it (nil: read it then);
// content that cannot be indexed is not queued.
func (t *Tx) noteIndex(id int64, data []byte) {
	if data != nil && (len(data) > MaxIndexBytes || !isText(data)) {
		delete(t.toIndex, id)
		return
	}
	if t.toIndex == nil {
		t.toIndex = map[int64][]byte{}
	}
	t.toIndex[id] = data
}

func (t *Tx) flushIndex() error {
	ids := make([]int64, 0, len(t.toIndex))
	for id := range t.toIndex {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		n, err := t.node(id)
		if errors.Is(err, sql.ErrNoRows) {
			continue // created and removed again in this transaction
		}
		if err != nil {
			return err
		}
		if err := t.index(n, t.toIndex[id]); err != nil {
			return err
		}
	}
	t.toIndex = nil
	return nil
}

// index adds file n's content (data, or read when nil) to the index
// unless it is there already or is not indexable text.
func (t *Tx) index(n *node, data []byte) error {
	if n.kind != KindFile || n.size == 0 || n.size > MaxIndexBytes {
		return nil
	}
	if data != nil && !isText(data) {
		return nil
	}
	key := contentKey(n.chunks)
	var one int
	err := t.row(`SELECT 1 FROM fts_docs WHERE key=?`, key[:]).Scan(&one)
	if err == nil {
		return nil
	}
	if data == nil {
		if data, err = t.content(n); err != nil {
			return err
		}
		if !isText(data) {
			return nil
		}
	}
	res, err := t.exec(`INSERT INTO fts_docs(key) VALUES(?)`, key[:])
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	doc, err := res.LastInsertId()
	if err != nil {
		return err
	}
	if _, err := t.exec(`INSERT INTO fts(rowid, body) VALUES(?, ?)`, doc, string(data)); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

// sweepIndex drops the documents whose content no node or version holds
// any more (GC).
func (t *Tx) sweepIndex(live map[[hashLen]byte]struct{}) error {
	rows, err := t.query(`SELECT id, key FROM fts_docs`)
	if err != nil {
		return mapSQLErr(err)
	}
	var dead []int64
	for rows.Next() {
		var id int64
		var key []byte
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return err
		}
		if _, ok := live[[hashLen]byte(key)]; !ok {
			dead = append(dead, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range dead {
		if _, err := t.exec(`DELETE FROM fts WHERE rowid=?`, id); err != nil {
			return err
		}
		if _, err := t.exec(`DELETE FROM fts_docs WHERE id=?`, id); err != nil {
			return err
		}
	}
	return nil
}

// treeFile is one entry of a tree walk.
type treeFile struct {
	path  string
	depth int
	n     node
}

// treeSQL walks the tree below node ?1 (depth ?2, 0: unlimited), giving
// each entry's path relative to it, depth, and attributes.
const treeSQL = `WITH RECURSIVE w(id, path, depth) AS (
	SELECT ?1, '', 0
	UNION ALL SELECT d.child, w.path || '/' || d.name, w.depth + 1 FROM dirents d JOIN w ON d.dir = w.id WHERE (?2 = 0 OR w.depth < ?2) AND d.name != ?3)
SELECT w.path, w.depth, n.id, n.ino, n.kind, n.mode, n.size, n.mtime, n.target, n.chunks, n.nlink FROM w JOIN nodes n ON n.id = w.id WHERE w.depth > 0 ORDER BY w.path`

// walkTree lists the entries below the directory at p, in path order, at
// most depth levels down (0: all). It returns the clean path of p.
func (t *Tx) walkTree(p string, depth int, fn func(f *treeFile) error) (string, error) {
	comps, chain, err := t.resolve("walk", p)
	if err != nil {
		return "", err
	}
	clean := JoinPath(comps)
	top := chain[len(chain)-1]
	if top.kind != KindDir {
		return clean, pathErr("walk", clean, ErrNotDir)
	}
	rows, err := t.queryText(treeSQL, top.id, depth, linksName)
	if err != nil {
		return clean, err
	}
	base := clean
	if base == "/" {
		base = ""
	}
	defer rows.Close()
	var links int64
	for rows.Next() {
		var f treeFile
		if err := rows.Scan(&f.path, &f.depth, &f.n.id, &f.n.ino, &f.n.kind, &f.n.mode, &f.n.size, &f.n.mtime, &f.n.target, &f.n.chunks, &f.n.nlink); err != nil {
			return clean, err
		}
		f.path = base + f.path
		if f.n.kind == kindLink {
			// A hard link shows its inode (other statements may run
			// while these rows are open).
			if links == 0 {
				if links, err = t.linksOf(t.v.root); err != nil {
					return clean, err
				}
			}
			in, err := t.inodeNode(links, &f.n)
			if err != nil {
				return clean, err
			}
			f.n = *in
		}
		if err := fn(&f); err != nil {
			return clean, err
		}
	}
	return clean, rows.Err()
}

// SearchHit is one file that matches a search.
type SearchHit struct {
	Path    string  `json:"path"`
	Snippet string  `json:"snippet"`
	Score   float64 `json:"score"` // bm25: lower is better
}

// searchDoc is a match of the index: a content's snippet and score.
type searchDoc struct {
	snippet string
	score   float64
}

// searchDocs runs the FTS5 query q over the index.
func (t *Tx) searchDocs(q string) (map[[hashLen]byte]searchDoc, error) {
	docs := map[[hashLen]byte]searchDoc{}
	rows, err := t.queryText(`SELECT d.key, snippet(fts, 0, '[', ']', '…', 12), bm25(fts) FROM fts JOIN fts_docs d ON d.id = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT 10000`, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var key []byte
		var d searchDoc
		if err := rows.Scan(&key, &d.snippet, &d.score); err != nil {
			return nil, err
		}
		docs[[hashLen]byte(key)] = d
	}
	return docs, rows.Err()
}

// Search returns the files whose content matches the FTS5 query q, best
// first, at most limit of them (0: 100); text that is not a valid query
// is searched for as a phrase.
func (t *Tx) Search(q string, limit int) ([]SearchHit, error) {
	if limit <= 0 {
		limit = 100
	}
	docs, err := t.searchDocs(q)
	if err != nil {
		// Text that is no FTS5 query (foo-bar, example.com, std::vector)
		// is looked for as a phrase: what a person typing it means.
		if phrase, perr := t.searchDocs(`"` + strings.ReplaceAll(q, `"`, `""`) + `"`); perr == nil {
			docs, err = phrase, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("search %q: %v: %w", q, err, ErrInvalidArgument)
	}
	hits := []SearchHit{}
	if len(docs) == 0 {
		return hits, nil
	}
	_, err = t.walkTree("/", 0, func(f *treeFile) error {
		if f.n.kind != KindFile {
			return nil
		}
		if d, ok := docs[contentKey(f.n.chunks)]; ok {
			hits = append(hits, SearchHit{Path: f.path, Snippet: d.snippet, Score: d.score})
		}
		return nil
	})
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score < hits[j].Score })
	if len(hits) > limit {
		hits = hits[:limit]
	}
	return hits, err
}

// Reindex indexes every file of the vault's tree that the index lacks and
// returns how many files it looked at.
func (t *Tx) Reindex() (int64, error) {
	var ids []int64
	if _, err := t.walkTree("/", 0, func(f *treeFile) error {
		if f.n.kind == KindFile {
			ids = append(ids, f.n.id)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for _, id := range ids {
		t.noteIndex(id, nil)
	}
	return int64(len(ids)), t.flushIndex()
}

// GrepOptions tune Grep.
type GrepOptions struct {
	IgnoreCase bool
	// Limit stops after this many matching lines (0: 1000).
	Limit int
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// maxGrepLine is the longest line Grep reports whole.
const maxGrepLine = 4096

// Grep matches the regular expression re against every line of every text
// file below p, in path order. It reads one file at a time, chunk by
// chunk, so memory stays flat however large the vault; it reports whether
// it stopped at the limit.
func (t *Tx) Grep(re string, p string, o GrepOptions) ([]GrepMatch, bool, error) {
	if o.IgnoreCase {
		re = "(?i)" + re
	}
	rx, err := regexp.Compile(re)
	if err != nil {
		return nil, false, fmt.Errorf("grep: %v: %w", err, ErrInvalidArgument)
	}
	if o.Limit <= 0 {
		o.Limit = 1000
	}
	type file struct {
		path string
		n    node
	}
	var files []file
	if _, err := t.walkTree(p, 0, func(f *treeFile) error {
		if f.n.kind == KindFile && f.n.size > 0 {
			files = append(files, file{f.path, f.n})
		}
		return nil
	}); err != nil {
		return nil, false, err
	}
	out := []GrepMatch{}
	for i := range files {
		f := &files[i]
		sc := bufio.NewScanner(&nodeReader{t: t, n: &f.n})
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		line := 0
		for sc.Scan() {
			line++
			b := sc.Bytes()
			if bytes.IndexByte(b, 0) >= 0 {
				break // binary: skip the file, as grep -I does
			}
			if !rx.Match(b) {
				continue
			}
			if len(b) > maxGrepLine {
				b = b[:maxGrepLine]
			}
			out = append(out, GrepMatch{Path: f.path, Line: line, Text: string(b)})
			if len(out) >= o.Limit {
				return out, true, nil
			}
		}
		if err := sc.Err(); err != nil && err != bufio.ErrTooLong {
			return out, false, err
		}
		files[i].n.chunks = nil
	}
	return out, false, nil
}

// nodeReader reads a file node chunk by chunk.
type nodeReader struct {
	t   *Tx
	n   *node
	off int64
}

func (r *nodeReader) Read(p []byte) (int, error) {
	if r.off >= r.n.size {
		return 0, io.EOF
	}
	k, err := r.t.readAt(r.n, r.off, p[:min(len(p), ChunkSize)])
	r.off += int64(k)
	return k, err
}

// FindOptions filter Find; zero values do not filter.
type FindOptions struct {
	Name     string // glob on the entry's name (path.Match)
	Kind     Kind   // KindFile, KindDir, KindSymlink; 0: any
	MinSize  int64
	MaxSize  int64             // 0: no limit
	MaxDepth int               // levels below the start (0: all)
	Tags     []string          // has every one of these tags
	Meta     map[string]string // has every one of these key=value pairs
}

// Find lists the entries below p that pass every filter, in path order.
func (t *Tx) Find(p string, o FindOptions) ([]Entry, error) {
	if o.Name != "" {
		if _, err := path.Match(o.Name, ""); err != nil {
			return nil, fmt.Errorf("find: name pattern %q: %w", o.Name, ErrInvalidArgument)
		}
	}
	out := []Entry{}
	_, err := t.walkTree(p, o.MaxDepth, func(f *treeFile) error {
		name := path.Base(f.path)
		if o.Kind != 0 && f.n.kind != o.Kind {
			return nil
		}
		if f.n.size < o.MinSize || (o.MaxSize > 0 && f.n.size > o.MaxSize) {
			return nil
		}
		if o.Name != "" {
			if ok, _ := path.Match(o.Name, name); !ok {
				return nil
			}
		}
		if ok, err := t.hasLabels(f.n.id, o.Tags, o.Meta); err != nil || !ok {
			return err
		}
		out = append(out, f.n.entry(name, f.path))
		return nil
	})
	return out, err
}

// Search, Reindex, Grep and Find on the vault, each in one transaction.

// Search returns the files matching the full-text query q, best first.
func (v *Vault) Search(ctx context.Context, q string, limit int) ([]SearchHit, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]SearchHit, error) { return t.Search(q, limit) })
}

// Reindex adds the vault's files the index lacks (search --rebuild).
func (v *Vault) Reindex(ctx context.Context, meta Meta) (int64, error) {
	n, _, err := write(ctx, v.s, v.namespace, v.name, meta, "search.reindex", true, func(t *Tx) (int64, error) { return t.Reindex() })
	return n, err
}

// Grep matches re against the lines of the text files below p.
func (v *Vault) Grep(ctx context.Context, re, p string, o GrepOptions) ([]GrepMatch, bool, error) {
	type res struct {
		m   []GrepMatch
		cut bool
	}
	r, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (res, error) {
		m, cut, err := t.Grep(re, p, o)
		return res{m, cut}, err
	})
	return r.m, r.cut, err
}

// Find lists the entries below p that pass o's filters.
func (v *Vault) Find(ctx context.Context, p string, o FindOptions) ([]Entry, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]Entry, error) { return t.Find(p, o) })
}

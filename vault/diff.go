package vault

import (
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Change is one entry of a ChangeSummary.
type Change struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

// Changes says how one tree differs from another. Each list is sorted by
// path; a directory added or deleted is listed with everything below it.
type Changes struct {
	Added        []Change `json:"added"`
	Modified     []Change `json:"modified"`
	Deleted      []Change `json:"deleted"`
	BytesAdded   int64    `json:"bytes_added"`
	BytesRemoved int64    `json:"bytes_removed"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Modified)+len(c.Deleted) == 0 }

// diff compares two trees from metadata alone: subtrees that share a node
// are skipped without a look, and files compare by chunk hashes, so
// unchanged content is never read.
func (t *Tx) diff(from, to int64) (Changes, error) {
	ch := Changes{Added: []Change{}, Modified: []Change{}, Deleted: []Change{}}
	if err := t.diffDir("/", from, to, &ch); err != nil {
		return ch, err
	}
	for _, l := range [][]Change{ch.Added, ch.Modified, ch.Deleted} {
		sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	}
	return ch, nil
}

// listingsSQL returns the listings of directories ?1 and ?2, one row per
// non-empty directory, each packed into one string "child/name/child/
// name..." with its entry count. Names never hold '/' (ValidName), and the
// count catches any that would (a damaged or crafted import): the string
// would then split into a different number of fields. Moving two packed
// strings costs about half what moving the 2×N rows does, and less than
// letting SQLite probe one listing for each entry of the other.
const listingsSQL = `SELECT dir, count(*), group_concat(child || '/' || name, '/') FROM dirents WHERE dir IN (?1, ?2) GROUP BY dir`

// nodePairSQL compares nodes ?1 and ?2: their kinds and sizes, and whether
// two non-directories differ in size, mode, owner, device number, target
// or content (chunk lists; NULL and empty both mean no content).
const nodePairSQL = `SELECT na.kind, na.size, nb.kind, nb.size,
	na.size != nb.size OR na.mode != nb.mode OR na.target != nb.target OR coalesce(na.chunks, x'') != coalesce(nb.chunks, x'')
	OR na.uid != nb.uid OR na.gid != nb.gid OR na.rdev != nb.rdev
FROM nodes na, nodes nb WHERE na.id = ?1 AND nb.id = ?2`

// unpackListing parses a listing packed by listingsSQL, sorted by name;
// ok is false unless it holds exactly n well-formed entries.
func unpackListing(packed string, n int64) (out []dirent, ok bool) {
	out = make([]dirent, 0, n)
	sorted := true
	for rest := packed; rest != ""; {
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return nil, false
		}
		child, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil {
			return nil, false
		}
		rest = rest[i+1:]
		name := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			name, rest = rest[:j], rest[j+1:]
			if rest == "" {
				return nil, false
			}
		} else {
			rest = ""
		}
		if len(out) > 0 && name <= out[len(out)-1].name {
			sorted = false
		}
		out = append(out, dirent{name: name, child: child})
	}
	if int64(len(out)) != n {
		return nil, false
	}
	if !sorted {
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
		for i := 1; i < len(out); i++ {
			if out[i].name == out[i-1].name {
				return nil, false
			}
		}
	}
	return out, true
}

// listings returns the listings of directories a and b, sorted by name.
func (t *Tx) listings(a, b int64) (la, lb []dirent, err error) {
	rows, err := t.query(listingsSQL, a, b)
	if err != nil {
		return nil, nil, err
	}
	ok := true
	for rows.Next() {
		var dir, n int64
		var packed string
		if err := rows.Scan(&dir, &n, &packed); err != nil {
			rows.Close()
			return nil, nil, err
		}
		l, good := unpackListing(packed, n)
		ok = ok && good
		if dir == a {
			la = l
		} else {
			lb = l
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, mapSQLErr(err)
	}
	if ok {
		return la, lb, nil
	}
	// A name that cannot be packed: read the listings row by row.
	if la, err = t.dirents(a); err != nil {
		return nil, nil, err
	}
	lb, err = t.dirents(b)
	return la, lb, err
}

func (t *Tx) diffDir(base string, a, b int64, ch *Changes) error {
	if a == b {
		return nil
	}
	la, lb, err := t.listings(a, b)
	if err != nil {
		return err
	}
	i, j := 0, 0
	for i < len(la) || j < len(lb) {
		switch {
		case j == len(lb) || (i < len(la) && la[i].name < lb[j].name):
			if err := t.listTree(joinChild(base, la[i].name), la[i].child, &ch.Deleted, &ch.BytesRemoved); err != nil {
				return err
			}
			i++
		case i == len(la) || lb[j].name < la[i].name:
			if err := t.listTree(joinChild(base, lb[j].name), lb[j].child, &ch.Added, &ch.BytesAdded); err != nil {
				return err
			}
			j++
		default:
			if err := t.diffEntry(joinChild(base, la[i].name), la[i].child, lb[j].child, ch); err != nil {
				return err
			}
			i++
			j++
		}
	}
	return nil
}

// diffEntry compares nodes a and b found under the same name.
func (t *Tx) diffEntry(p string, a, b int64, ch *Changes) error {
	if a == b {
		return nil
	}
	var ka, kb Kind
	var sa, sb int64
	var differ sql.NullBool
	if err := t.row(nodePairSQL, a, b).Scan(&ka, &sa, &kb, &sb, &differ); err != nil {
		return fmt.Errorf("diff %s: load nodes %d, %d: %w", p, a, b, mapSQLErr(err))
	}
	switch {
	case ka != kb:
		if err := t.listTree(p, a, &ch.Deleted, &ch.BytesRemoved); err != nil {
			return err
		}
		return t.listTree(p, b, &ch.Added, &ch.BytesAdded)
	case ka == KindDir:
		return t.diffDir(p, a, b, ch)
	case differ.Bool:
		ch.Modified = append(ch.Modified, Change{Path: p, Type: kb.String(), Size: sb})
		if kb == KindFile {
			if d := sb - sa; d > 0 {
				ch.BytesAdded += d
			} else {
				ch.BytesRemoved -= d
			}
		}
	}
	return nil
}

// listTreeSQL lists the subtree at node ?1, whose path is ?2: each node's
// path, kind and size.
const listTreeSQL = `WITH RECURSIVE s(id, path) AS (
	SELECT ?1, ?2
	UNION ALL
	SELECT d.child, CASE WHEN s.path = '/' THEN '/' ELSE s.path || '/' END || d.name
	FROM s JOIN dirents d ON d.dir = s.id
) SELECT s.path, n.kind, n.size FROM s JOIN nodes n ON n.id = s.id`

// listTree appends the entry at p and everything below it to out.
func (t *Tx) listTree(p string, id int64, out *[]Change, total *int64) error {
	rows, err := t.query(listTreeSQL, id, p)
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := false
	for rows.Next() {
		var c Change
		var k Kind
		if err := rows.Scan(&c.Path, &k, &c.Size); err != nil {
			return err
		}
		c.Type = k.String()
		*out = append(*out, c)
		if k == KindFile {
			*total += c.Size
		}
		seen = true
	}
	if err := rows.Err(); err != nil {
		return mapSQLErr(err)
	}
	if !seen {
		return fmt.Errorf("load node %d: %w", id, sql.ErrNoRows)
	}
	return nil
}

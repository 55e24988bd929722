package vault

import (
	"bytes"
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
// unchanged content is never read. A hard-linked file is compared as its
// inode, under each of its names (linked).
func (t *Tx) diff(from, to int64) (Changes, error) {
	ch := Changes{Added: []Change{}, Modified: []Change{}, Deleted: []Change{}}
	d := &differ{t: t, ch: &ch}
	if from != to {
		var err error
		if d.la, err = t.linksOf(from); err != nil {
			return ch, err
		}
		if d.lb, err = t.linksOf(to); err != nil {
			return ch, err
		}
		if err := d.dir("/", from, to); err != nil {
			return ch, err
		}
		if err := d.linked(to); err != nil {
			return ch, err
		}
	}
	for _, l := range [][]Change{ch.Added, ch.Modified, ch.Deleted} {
		sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	}
	return ch, nil
}

// differ is one comparison of tree a with tree b, whose hidden
// directories of hard-linked inodes are la and lb (0: none).
type differ struct {
	t      *Tx
	ch     *Changes
	la, lb int64
}

// listingsSQL returns the listings of directories ?1 and ?2, one row per
// non-empty directory, each packed into one string "child/name/child/
// name..." with its entry count. Names never hold '/' (ValidName), and the
// count catches any that would (a damaged or crafted import): the string
// would then split into a different number of fields. Moving two packed
// strings costs about half what moving the 2×N rows does, and less than
// letting SQLite probe one listing for each entry of the other.
const listingsSQL = `SELECT dir, count(*), group_concat(child || '/' || name, '/') FROM dirents WHERE dir IN (?1, ?2) GROUP BY dir`

// nodePairSQL compares nodes ?1 and ?2: their kinds and sizes, whether
// two non-directories differ in size, mode, owner, device number, target
// or content (chunk lists; NULL and empty both mean no content), and
// whether they differ in their chunk lists alone (see sameContent).
const nodePairSQL = `SELECT na.kind, na.size, nb.kind, nb.size, na.target, nb.target,
	na.size != nb.size OR na.mode != nb.mode OR na.target != nb.target OR coalesce(na.chunks, x'') != coalesce(nb.chunks, x'')
	OR na.uid != nb.uid OR na.gid != nb.gid OR na.rdev != nb.rdev,
	na.kind = nb.kind AND na.size = nb.size AND na.mode = nb.mode AND na.target = nb.target
	AND na.uid = nb.uid AND na.gid = nb.gid AND na.rdev = nb.rdev
FROM nodes na, nodes nb WHERE na.id = ?1 AND nb.id = ?2`

// nodePair is what nodePairSQL says of two nodes; differ is false for
// files whose lists differ but whose content does not (sameContent).
type nodePair struct {
	ka, kb Kind
	sa, sb int64
	ta, tb string
	differ bool
}

func (t *Tx) nodePair(a, b int64) (nodePair, error) {
	var np nodePair
	var differ, onlyChunks sql.NullBool
	if err := t.row(nodePairSQL, a, b).Scan(&np.ka, &np.sa, &np.kb, &np.sb, &np.ta, &np.tb, &differ, &onlyChunks); err != nil {
		return np, fmt.Errorf("load nodes %d, %d: %w", a, b, mapSQLErr(err))
	}
	np.differ = differ.Bool
	if np.differ && onlyChunks.Bool && np.ka == KindFile {
		same, err := t.sameContent(a, b)
		if err != nil {
			return np, err
		}
		np.differ = !same
	}
	return np, nil
}

// sameContent reports whether files a and b, whose chunk lists differ,
// hold the same content anyway: lists that split a run of holes
// differently (a dense list keeps one record per hole chunk).
func (t *Tx) sameContent(a, b int64) (bool, error) {
	var la, lb []byte
	if err := t.row(`SELECT coalesce(na.chunks, x''), coalesce(nb.chunks, x'') FROM nodes na, nodes nb WHERE na.id = ?1 AND nb.id = ?2`, a, b).Scan(&la, &lb); err != nil {
		return false, fmt.Errorf("load chunk lists of %d, %d: %w", a, b, mapSQLErr(err))
	}
	return bytes.Equal(appendRecords(nil, la), appendRecords(nil, lb)), nil
}

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

func (d *differ) dir(base string, a, b int64) error {
	if a == b {
		return nil
	}
	t := d.t
	la, lb, err := t.listings(a, b)
	if err != nil {
		return err
	}
	if base == "/" {
		la, lb = withoutLinks(la), withoutLinks(lb)
	}
	i, j := 0, 0
	for i < len(la) || j < len(lb) {
		switch {
		case j == len(lb) || (i < len(la) && la[i].name < lb[j].name):
			if err := d.tree(joinChild(base, la[i].name), la[i].child, false); err != nil {
				return err
			}
			i++
		case i == len(la) || lb[j].name < la[i].name:
			if err := d.tree(joinChild(base, lb[j].name), lb[j].child, true); err != nil {
				return err
			}
			j++
		default:
			if err := d.entry(joinChild(base, la[i].name), la[i].child, lb[j].child); err != nil {
				return err
			}
			i++
			j++
		}
	}
	return nil
}

// withoutLinks is listing l without the hidden directory.
func withoutLinks(l []dirent) []dirent {
	for i, e := range l {
		if e.name == linksName {
			return append(l[:i:i], l[i+1:]...)
		}
	}
	return l
}

// entry compares nodes a and b found under the same name.
func (d *differ) entry(p string, a, b int64) error {
	if a == b {
		return nil
	}
	t, ch := d.t, d.ch
	np, err := t.nodePair(a, b)
	if err != nil {
		return fmt.Errorf("diff %s: %w", p, err)
	}
	ka, kb, sa, sb, ta, tb := np.ka, np.kb, np.sa, np.sb, np.ta, np.tb
	if ka == kindLink || kb == kindLink {
		if ka == kb && ta == tb {
			return nil // one inode under this name: linked compares it
		}
		if ka == kindLink {
			if a, err = t.stubTarget(d.la, ta); err != nil {
				return err
			}
		}
		if kb == kindLink {
			if b, err = t.stubTarget(d.lb, tb); err != nil {
				return err
			}
		}
		return d.entry(p, a, b)
	}
	switch {
	case ka != kb:
		if err := d.tree(p, a, false); err != nil {
			return err
		}
		return d.tree(p, b, true)
	case ka == KindDir:
		return d.dir(p, a, b)
	case np.differ:
		ch.Modified = append(ch.Modified, Change{Path: p, Type: kb.String(), Size: sb})
		if kb == KindFile {
			d.bytes(sa, sb)
		}
	}
	return nil
}

// bytes counts a file's change of size from sa to sb.
func (d *differ) bytes(sa, sb int64) {
	if n := sb - sa; n > 0 {
		d.ch.BytesAdded += n
	} else {
		d.ch.BytesRemoved -= n
	}
}

// listTreeSQL lists the subtree at node ?1, whose path is ?2: each node's
// path, kind, size and target (a stub's inode).
const listTreeSQL = `WITH RECURSIVE s(id, path) AS (
	SELECT ?1, ?2
	UNION ALL
	SELECT d.child, CASE WHEN s.path = '/' THEN '/' ELSE s.path || '/' END || d.name
	FROM s JOIN dirents d ON d.dir = s.id
) SELECT s.path, n.kind, n.size, n.target FROM s JOIN nodes n ON n.id = s.id`

// tree lists the entry at p, node id, and everything below it as added
// (in tree b) or deleted (from tree a). A hard-linked file shows as its
// inode; the bytes of changes count per name, as they are listed.
func (d *differ) tree(p string, id int64, added bool) error {
	t := d.t
	out, total, own := &d.ch.Deleted, &d.ch.BytesRemoved, d.la
	if added {
		out, total, own = &d.ch.Added, &d.ch.BytesAdded, d.lb
	}
	rows, err := t.query(listTreeSQL, id, p)
	if err != nil {
		return err
	}
	type stub struct {
		at     int
		target string
	}
	var stubs []stub
	seen := false
	for rows.Next() {
		var c Change
		var k Kind
		var target string
		if err := rows.Scan(&c.Path, &k, &c.Size, &target); err != nil {
			rows.Close()
			return err
		}
		seen = true
		if k == kindLink {
			stubs = append(stubs, stub{len(*out), target})
		} else if k == KindFile {
			*total += c.Size
		}
		c.Type = k.String()
		*out = append(*out, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return mapSQLErr(err)
	}
	if !seen {
		return fmt.Errorf("load node %d: %w", id, sql.ErrNoRows)
	}
	for _, s := range stubs {
		in, err := t.inodeNode(own, &node{target: s.target})
		if err != nil {
			return err
		}
		c := &(*out)[s.at]
		c.Type, c.Size = in.kind.String(), in.size
		if in.kind == KindFile {
			*total += in.size
		}
	}
	return nil
}

// stubsSQL lists the stubs of the tree at node ?1 (hard links), with
// their paths and the inodes they name.
const stubsSQL = `WITH RECURSIVE w(id, path) AS (
	SELECT ?1, ''
	UNION ALL SELECT d.child, w.path || '/' || d.name FROM dirents d JOIN w ON d.dir = w.id WHERE d.name != ?2
) SELECT w.path, n.target FROM w JOIN nodes n ON n.id = w.id WHERE n.kind = ?3`

// linked reports the hard-linked files whose inode changed between the
// trees under every name tree b (node to) has for them. The walk of the
// names left them out where both trees name one inode: a changed inode
// changes under names in directories the walk skipped as unchanged.
func (d *differ) linked(to int64) error {
	if d.la == 0 || d.lb == 0 || d.la == d.lb {
		return nil
	}
	t := d.t
	la, lb, err := t.listings(d.la, d.lb)
	if err != nil {
		return err
	}
	type inode struct {
		kind         Kind
		size, before int64
	}
	changed := map[string]inode{}
	i, j := 0, 0
	for i < len(la) && j < len(lb) {
		switch {
		case la[i].name < lb[j].name:
			i++
		case lb[j].name < la[i].name:
			j++
		default:
			if la[i].child != lb[j].child {
				np, err := t.nodePair(la[i].child, lb[j].child)
				if err != nil {
					return fmt.Errorf("diff hard links: %w", err)
				}
				if np.differ || np.ka != np.kb {
					changed[lb[j].name] = inode{np.kb, np.sb, np.sa}
				}
			}
			i++
			j++
		}
	}
	if len(changed) == 0 {
		return nil
	}
	reported := map[string]bool{}
	for _, c := range d.ch.Added {
		reported[c.Path] = true
	}
	for _, c := range d.ch.Modified {
		reported[c.Path] = true
	}
	rows, err := t.queryText(stubsSQL, to, linksName, kindLink)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p, target string
		if err := rows.Scan(&p, &target); err != nil {
			return err
		}
		if in, ok := changed[target]; ok && !reported[p] {
			d.ch.Modified = append(d.ch.Modified, Change{Path: p, Type: in.kind.String(), Size: in.size})
			if in.kind == KindFile {
				d.bytes(in.before, in.size)
			}
		}
	}
	return mapSQLErr(rows.Err())
}

package vault

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// Vault.ReadFile and Vault.Stat answer the common case in one SQL
// statement, without BEGIN and ROLLBACK: the statement finds the vault's
// root, walks the path (as a join per component, see walk.go) and, for a
// file of at most one chunk, fetches its content. One statement reads one
// consistent snapshot, as a transaction would. Anything else (a missing
// vault, a larger file, a missing chunk, a path longer than maxJoinWalk)
// goes the long way, through a read transaction, which also produces the
// exact error.

// fastReadSQL()[k] walks k components (?4, ?5, ...) from the root of vault
// (?1, ?2) and returns one row: the kind and depth of the deepest node
// reached (kind*64 + depth), the Entry fields of the node of all k
// components, the length of its chunk list and, with ?3 true, the content
// of a file of one chunk (one hash). Built at first use, not at package
// init: every avfs command links this package, few open a store.
var fastReadSQL = sync.OnceValue(func() (qs [maxJoinWalk + 1]string) {
	for k := range qs {
		var b strings.Builder
		b.WriteString(`SELECT coalesce(`)
		for i := k; i >= 0; i-- {
			fmt.Fprintf(&b, `n%d.kind*64 + %d, `, i, i)
		}
		b.WriteString(`NULL), `)
		fmt.Fprintf(&b, `n%[1]d.ino, n%[1]d.mode, n%[1]d.size, n%[1]d.mtime, n%[1]d.ctime, n%[1]d.target, length(n%[1]d.chunks), n%[1]d.uid, n%[1]d.gid, n%[1]d.rdev, n%[1]d.atime, n%[1]d.nlink,
	CASE WHEN ?3 AND n%[1]d.kind = %[2]d AND length(n%[1]d.chunks) = %[3]d THEN (SELECT c.data FROM chunks c WHERE c.hash = n%[1]d.chunks) END
FROM vaults v JOIN nodes n0 ON n0.id = v.root`, k, KindFile, hashLen)
		writeJoins(&b, k, 4)
		b.WriteString(` WHERE v.namespace = ?1 AND v.name = ?2`)
		qs[k] = b.String()
	}
	return qs
})

// fastResolve resolves p in vault ns/name with fastReadSQL. ok is false
// when the caller must take the long way; otherwise n and err are the
// answer: the node at p (the fields an Entry shows), the length of its
// chunk list, and with withData the content of a file of one chunk (nil
// if its chunk is missing).
func (s *Store) fastResolve(ctx context.Context, ns, name, op, p string, withData bool) (comps []string, n *node, listLen int64, data []byte, ok bool, err error) {
	comps, err = CleanPath(p)
	if err != nil {
		return nil, nil, 0, nil, true, err
	}
	k := len(comps)
	if k > maxJoinWalk {
		return nil, nil, 0, nil, false, nil
	}
	st, err := s.prepared(ctx, fastReadSQL()[k])
	if err != nil {
		return nil, nil, 0, nil, false, nil
	}
	args := make([]any, 0, k+3)
	args = append(args, ns, name, withData)
	for _, c := range comps {
		args = append(args, c)
	}
	v, err := scanValues(st.QueryRowContext(ctx, args...), 14)
	if err != nil || v[0] == nil {
		// No vault (no row), or an error: the long way says which.
		return nil, nil, 0, nil, false, nil
	}
	kind, depth := Kind(asInt(v[0])/64), int(asInt(v[0])%64)
	if depth < k {
		if kind != KindDir {
			return nil, nil, 0, nil, true, pathErr(op, p, ErrNotDir)
		}
		return nil, nil, 0, nil, true, pathErr(op, p, ErrNotFound)
	}
	if kind == kindLink {
		return nil, nil, 0, nil, false, nil // a hard link: its inode is elsewhere
	}
	n = &node{kind: kind, ino: asInt(v[1]), mode: uint32(asInt(v[2])), size: asInt(v[3]), mtime: asInt(v[4]), ctime: asInt(v[5]), target: asString(v[6])}
	n.scanAttrs(v[8:13])
	data, _ = v[13].([]byte)
	return comps, n, asInt(v[7]), data, true, nil
}

// readFast is ReadFile's one-statement path; ok false means "go the long
// way".
func (s *Store) readFast(ctx context.Context, ns, name, p string) (data []byte, e Entry, ok bool, err error) {
	const op = "read"
	comps, n, listLen, last, ok, err := s.fastResolve(ctx, ns, name, op, p, true)
	if !ok || err != nil {
		return nil, Entry{}, ok, err
	}
	switch n.kind {
	case KindFile:
	case KindDir:
		return nil, Entry{}, true, pathErr(op, p, ErrIsDir)
	default:
		return nil, Entry{}, true, pathErr(op, p, fmt.Errorf("is a %s: %w", n.kind, ErrInvalidArgument))
	}
	switch {
	case n.size == 0:
		data = make([]byte, 0)
	case n.size <= ChunkSize && listLen == hashLen && int64(len(last)) >= n.size:
		data = last[:n.size]
	default:
		return nil, Entry{}, false, nil
	}
	return data, n.entry(nameOf(comps), JoinPath(comps)), true, nil
}

// statFast is Stat's one-statement path; ok false means "go the long way".
func (s *Store) statFast(ctx context.Context, ns, name, p string) (e Entry, ok bool, err error) {
	comps, n, _, _, ok, err := s.fastResolve(ctx, ns, name, "stat", p, false)
	if !ok || err != nil {
		return Entry{}, ok, err
	}
	return n.entry(nameOf(comps), JoinPath(comps)), true, nil
}

// SmallFile is a file of a directory with its whole content, as
// Vault.ReadSmall returns it.
type SmallFile struct {
	Entry
	Data []byte
}

// ReadSmall reads, in one read transaction, the regular files of
// directory dir whose names sort at or after from, in name order, up to
// limit of them, each with its whole content, leaving out every file
// larger than maxSize (at most ChunkSize), with holes, or with other
// names (hard links): one query for many small files, which a reader of
// a whole directory (cat *, grep -r, git add, a compiler) reads one after
// the other. Files are read, not checked: a caller that caches them
// compares each Entry with what it knows.
func (v *Vault) ReadSmall(ctx context.Context, dir, from string, limit int, maxSize int64) ([]SmallFile, error) {
	maxSize = min(maxSize, ChunkSize)
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]SmallFile, error) {
		const op = "read"
		comps, chain, err := t.resolve(op, dir)
		if err != nil {
			return nil, err
		}
		d := chain[len(chain)-1]
		if d.kind != KindDir {
			return nil, pathErr(op, dir, ErrNotDir)
		}
		base := JoinPath(comps)
		// A file of one chunk lists one hash; an empty file none.
		rows, err := t.query(`SELECT d.name, n.ino, n.mode, n.size, n.mtime, n.ctime, n.uid, n.gid, n.rdev, n.atime, n.nlink, c.data
			FROM dirents d JOIN nodes n ON n.id = d.child LEFT JOIN chunks c ON c.hash = n.chunks
			WHERE d.dir = ? AND d.name >= ? AND n.kind = ? AND n.size <= ? AND (n.size = 0 OR length(n.chunks) = ?)
			ORDER BY d.name LIMIT ?`, d.id, from, KindFile, maxSize, hashLen, limit)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		defer rows.Close()
		var out []SmallFile
		for rows.Next() {
			var name string
			var data []byte
			n := &node{kind: KindFile}
			if err := rows.Scan(&name, &n.ino, &n.mode, &n.size, &n.mtime, &n.ctime, &n.uid, &n.gid, &n.rdev, &n.atime, &n.nlink, &data); err != nil {
				return nil, mapSQLErr(err)
			}
			if n.size > 0 && int64(len(data)) < n.size {
				continue // its chunk is missing: the long way reports it
			}
			if data == nil {
				data = []byte{}
			}
			out = append(out, SmallFile{Entry: n.entry(name, joinChild(base, name)), Data: data[:n.size]})
		}
		return out, mapSQLErr(rows.Err())
	})
}

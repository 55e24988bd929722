package vault

import (
	"context"
	"database/sql"
	"fmt"
)

// Vault.ReadFile and Vault.Stat answer the common case in one SQL
// statement, without BEGIN and ROLLBACK: the statement finds the vault's
// root, walks the path and, for a file of at most one chunk, fetches its
// content. One statement reads one consistent snapshot, as a transaction
// would. Anything else (a missing vault, a larger file, a missing chunk)
// goes the long way, through a read transaction, which also produces the
// exact error.

// readSQL walks path ?3 (as walkSQL takes it) from the root of vault
// (?1, ?2) and returns one row: the deepest node it reached, with its
// depth, the length of its chunk list and, with ?4 true, the content of a
// file of one chunk. The recursion joins nodes so that a missing node ends
// the walk rather than being skipped.
var readSQL = `WITH RECURSIVE w(depth, id, rest) AS (
	SELECT 0, v.root, ?3 FROM vaults v WHERE v.namespace = ?1 AND v.name = ?2
	UNION ALL
	SELECT w.depth + 1, d.child, substr(w.rest, instr(w.rest, '/') + 1)
	FROM w JOIN dirents d ON d.dir = w.id AND d.name = substr(w.rest, 1, instr(w.rest, '/') - 1)
	JOIN nodes nx ON nx.id = d.child
	WHERE w.rest != ''
) SELECT w.depth, n.ino, n.kind, n.mode, n.size, n.mtime, n.ctime, n.target, length(n.chunks),
	CASE WHEN ?4 AND w.rest = '' AND n.kind = ` + fmt.Sprint(int(KindFile)) + ` AND length(n.chunks) = ` + fmt.Sprint(hashLen) + `
	THEN (SELECT c.data FROM chunks c WHERE c.hash = n.chunks) END
FROM w JOIN nodes n ON n.id = w.id ORDER BY w.depth DESC LIMIT 1`

// fastResolve resolves p in vault ns/name with readSQL. ok is false when
// the caller must take the long way; otherwise n and err are the answer:
// the node at p (only the fields an Entry shows, and size), the length of
// its chunk list, and with withData the content of a file of one chunk
// (nil if its chunk is missing).
func (s *Store) fastResolve(ctx context.Context, ns, name, op, p string, withData bool) (comps []string, n *node, listLen int, data []byte, ok bool, err error) {
	comps, err = CleanPath(p)
	if err != nil {
		return nil, nil, 0, nil, true, err
	}
	st, err := s.prepared(ctx, readSQL)
	if err != nil {
		return nil, nil, 0, nil, false, nil
	}
	var depth int
	var ll sql.NullInt64
	n = &node{}
	err = st.QueryRowContext(ctx, ns, name, walkArg(comps), withData).Scan(&depth, &n.ino, &n.kind, &n.mode, &n.size, &n.mtime, &n.ctime, &n.target, &ll, &data)
	if err != nil || depth < 0 || depth > len(comps) {
		// No vault (no row), or an error: the long way says which.
		return nil, nil, 0, nil, false, nil
	}
	if depth < len(comps) {
		if n.kind != KindDir {
			return nil, nil, 0, nil, true, pathErr(op, p, ErrNotDir)
		}
		return nil, nil, 0, nil, true, pathErr(op, p, ErrNotFound)
	}
	return comps, n, int(ll.Int64), data, true, nil
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
	case KindDir:
		return nil, Entry{}, true, pathErr(op, p, ErrIsDir)
	case KindSymlink:
		return nil, Entry{}, true, pathErr(op, p, fmt.Errorf("is a symlink: %w", ErrInvalidArgument))
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

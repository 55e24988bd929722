package vault

import (
	"context"
	"errors"
	"fmt"
)

// reachableSQL lists the node ids reachable from the given roots. UNION
// (not UNION ALL) visits a subtree shared by several roots only once.
const reachableSQL = `WITH RECURSIVE live(id) AS (%s UNION SELECT d.child FROM dirents d JOIN live ON d.dir = live.id)`

// storedBytes is the size of the distinct content the live tree references:
// what the vault would occupy on its own, after deduplication.
func (t *Tx) storedBytes() (int64, error) {
	rows, err := t.query(fmt.Sprintf(reachableSQL, `SELECT ?`)+
		` SELECT n.size, n.chunks FROM nodes n JOIN live ON n.id = live.id WHERE n.kind = ?`, t.v.root, KindFile)
	if err != nil {
		return 0, mapSQLErr(err)
	}
	defer rows.Close()
	seen := map[[hashLen]byte]struct{}{}
	var total int64
	for rows.Next() {
		var size int64
		var list []byte
		if err := rows.Scan(&size, &list); err != nil {
			return 0, err
		}
		for idx, r := range records(list) {
			if _, hole := holeRun(r); hole {
				continue
			}
			h := [hashLen]byte(r)
			if _, ok := seen[h]; ok {
				continue
			}
			seen[h] = struct{}{}
			total += min(ChunkSize, size-idx*ChunkSize)
		}
	}
	return total, rows.Err()
}

// GCStats says what a collection freed.
type GCStats struct {
	Nodes  int64 `json:"nodes"`
	Chunks int64 `json:"chunks"`
	Bytes  int64 `json:"bytes"`
}

// GC frees every node and chunk that no vault, checkpoint, fork or file
// version references. It marks from all roots in one write transaction, so nothing
// reachable can be freed by a concurrent change.
func (s *Store) GC(ctx context.Context) (GCStats, error) { return s.gc(ctx, false) }

// GCDryRun says what GC would free, and frees nothing: it collects in a
// transaction that it then rolls back.
func (s *Store) GCDryRun(ctx context.Context) (GCStats, error) { return s.gc(ctx, true) }

// errDryRun rolls back a dry run's transaction.
var errDryRun = errors.New("dry run")

func (s *Store) gc(ctx context.Context, dry bool) (GCStats, error) {
	var out GCStats
	_, _, err := write(ctx, s, "", "", Meta{}, "gc", false, func(t *Tx) (GCStats, error) {
		st, err := t.gc()
		out = st
		if err == nil && dry {
			err = errDryRun
		}
		return st, err
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	return out, err
}

func (t *Tx) gc() (GCStats, error) {
	var st GCStats
	if _, err := t.execText(`CREATE TEMP TABLE IF NOT EXISTS gc_live(id INTEGER PRIMARY KEY)`); err != nil {
		return st, err
	}
	defer t.execText(`DROP TABLE IF EXISTS temp.gc_live`)
	if _, err := t.execText(fmt.Sprintf(reachableSQL, `SELECT root FROM vaults UNION SELECT root FROM checkpoints`) +
		` INSERT INTO gc_live SELECT id FROM live`); err != nil {
		return st, fmt.Errorf("gc mark: %w", err)
	}
	t.wc = nil
	if _, err := t.execText(`DELETE FROM dirents WHERE dir NOT IN (SELECT id FROM gc_live)`); err != nil {
		return st, fmt.Errorf("gc sweep: %w", err)
	}
	res, err := t.execText(`DELETE FROM nodes WHERE id NOT IN (SELECT id FROM gc_live)`)
	if err != nil {
		return st, fmt.Errorf("gc sweep: %w", err)
	}
	st.Nodes, _ = res.RowsAffected()
	// Chunks: mark by hash from the surviving nodes' chunk lists.
	used := map[[hashLen]byte]struct{}{}
	docs := map[[hashLen]byte]struct{}{} // full-text documents still held
	// File history lists content by hash too (history.go).
	rows, err := t.query(`SELECT chunks FROM nodes WHERE kind = ? AND chunks IS NOT NULL UNION ALL SELECT chunks FROM versions WHERE chunks IS NOT NULL`, KindFile)
	if err != nil {
		return st, mapSQLErr(err)
	}
	for rows.Next() {
		var list []byte
		if err := rows.Scan(&list); err != nil {
			rows.Close()
			return st, err
		}
		for h := range contentHashes(list) {
			used[h] = struct{}{}
		}
		docs[contentKey(list)] = struct{}{}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	rows, err = t.query(`SELECT id, hash, length(data) FROM chunks`)
	if err != nil {
		return st, mapSQLErr(err)
	}
	var dead []int64
	for rows.Next() {
		var id, n int64
		var h []byte
		if err := rows.Scan(&id, &h, &n); err != nil {
			rows.Close()
			return st, err
		}
		if _, ok := used[[hashLen]byte(h)]; !ok {
			dead = append(dead, id)
			st.Bytes += n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, err
	}
	for _, id := range dead {
		if _, err := t.exec(`DELETE FROM chunks WHERE id=?`, id); err != nil {
			return st, err
		}
	}
	st.Chunks = int64(len(dead))
	return st, t.sweepIndex(docs)
}

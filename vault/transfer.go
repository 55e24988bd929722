package vault

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Hash names a chunk: the SHA-256 of its data.
type Hash [hashLen]byte

// String is the hash in hex, as object names and logs show it.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// ParseHash reads a hash written by Hash.String.
func ParseHash(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != hashLen {
		return h, fmt.Errorf("chunk hash %q: %w", s, ErrInvalidArgument)
	}
	return Hash(b), nil
}

// ManifestChunks lists the distinct chunks the nodes and file versions
// of an export file (Export or ExportManifest) reference, in no
// particular order.
func ManifestChunks(ctx context.Context, file string) ([]Hash, error) {
	db, err := sql.Open("sqlite", "file:"+file+"?mode=ro")
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", file, err)
	}
	defer db.Close()
	q := `SELECT chunks FROM nodes WHERE chunks IS NOT NULL`
	var hasVersions int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='versions'`).Scan(&hasVersions); err == nil && hasVersions > 0 {
		q += ` UNION ALL SELECT chunks FROM versions WHERE chunks IS NOT NULL` // file history travels too
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("manifest %s is not an avfs vault export: %w", file, ErrInvalidArgument)
	}
	defer rows.Close()
	seen := map[Hash]struct{}{}
	var out []Hash
	for rows.Next() {
		var list []byte
		if err := rows.Scan(&list); err != nil {
			return nil, mapSQLErr(err)
		}
		for c := range contentHashes(list) {
			h := Hash(c)
			if _, ok := seen[h]; !ok {
				seen[h] = struct{}{}
				out = append(out, h)
			}
		}
	}
	return out, mapSQLErr(rows.Err())
}

// MissingChunks returns the hashes of hs this store holds no chunk for.
func (s *Store) MissingChunks(ctx context.Context, hs []Hash) ([]Hash, error) {
	return s.absent(ctx, `SELECT hash FROM chunks WHERE hash IN `, nil, hs)
}

// absentBatch is how many hashes one query looks up: well under SQLite's
// limit of 32,766 parameters, and one query instead of hundreds.
const absentBatch = 512

// absent returns the hashes of hs that query (ending in "IN ", taking
// args first, then a parenthesised list of hashes) does not return.
func (s *Store) absent(ctx context.Context, query string, args []any, hs []Hash) ([]Hash, error) {
	var out []Hash
	for len(hs) > 0 {
		batch := hs[:min(absentBatch, len(hs))]
		hs = hs[len(batch):]
		// Lists are padded (with repeats) to a power of two, so that a few
		// prepared statements serve every length.
		n := 1
		for n < len(batch) {
			n *= 2
		}
		q := query + "(?" + strings.Repeat(",?", n-1) + ")"
		st, err := s.prepared(ctx, q)
		if err != nil {
			return nil, err
		}
		a := append([]any(nil), args...)
		for i := range n {
			h := batch[min(i, len(batch)-1)]
			a = append(a, h[:])
		}
		rows, err := st.QueryContext(ctx, a...)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		found := map[Hash]struct{}{}
		for rows.Next() {
			var h []byte
			if err := rows.Scan(&h); err != nil {
				rows.Close()
				return nil, mapSQLErr(err)
			}
			found[Hash(h)] = struct{}{}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapSQLErr(err)
		}
		for _, h := range batch {
			if _, ok := found[h]; !ok {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

// Chunk returns the data of chunk h.
func (s *Store) Chunk(ctx context.Context, h Hash) ([]byte, error) {
	st, err := s.prepared(ctx, `SELECT data FROM chunks WHERE hash=?`)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = st.QueryRowContext(ctx, h[:]).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("chunk %s: %w", h, ErrNotFound)
	}
	return data, mapSQLErr(err)
}

// AddChunks writes chunks received from elsewhere into the chunks table
// of file, a manifest (ExportManifest) about to be imported, after
// checking that each chunk's data has its hash. Import then stores them
// in the same transaction that makes the vault reference them, so that
// no GC in between can free them.
func AddChunks(ctx context.Context, file string, chunks map[Hash][]byte) error {
	for h, data := range chunks {
		if sha256.Sum256(data) != h {
			return fmt.Errorf("chunk %s: data does not match its hash: %w", h, ErrInvalidArgument)
		}
	}
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)")
	if err != nil {
		return fmt.Errorf("add chunks to %s: %w", file, err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add chunks to %s: %w", file, mapSQLErr(err))
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `INSERT INTO chunks(hash, data) VALUES(?, ?) ON CONFLICT(hash) DO NOTHING`)
	if err != nil {
		return fmt.Errorf("add chunks to %s: %w", file, mapSQLErr(err))
	}
	for h, data := range chunks {
		if _, err := st.ExecContext(ctx, h[:], data); err != nil {
			return fmt.Errorf("add chunks to %s: %w", file, mapSQLErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add chunks to %s: %w", file, mapSQLErr(err))
	}
	return nil
}

// Unsent returns the hashes of hs not yet recorded (MarkSent) as held by
// remote, a name for a place chunks are copied to.
func (s *Store) Unsent(ctx context.Context, remote string, hs []Hash) ([]Hash, error) {
	return s.absent(ctx, `SELECT hash FROM remote_chunks WHERE remote=? AND hash IN `, []any{remote}, hs)
}

// MarkSent records that remote holds the chunks hs.
func (s *Store) MarkSent(ctx context.Context, remote string, hs []Hash) error {
	s.lockWriter()
	defer s.wmu.Unlock()
	conn, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("mark sent: begin: %w", err)
	}
	st, err := s.writerStmt(ctx, `INSERT INTO remote_chunks(remote, hash) VALUES(?, ?) ON CONFLICT DO NOTHING`)
	for _, h := range hs {
		if err != nil {
			break
		}
		_, err = st.ExecContext(ctx, remote, h[:])
		err = mapSQLErr(err)
	}
	if err == nil {
		err = s.commit(ctx)
	}
	if err != nil {
		s.rollback(conn)
		return fmt.Errorf("mark sent: %w", err)
	}
	return nil
}

// ID returns the store's identity, made once at random: processes that
// open the same file share it, so it tells whether two workers see the
// same vaults.
func (s *Store) ID(ctx context.Context) (string, error) {
	if id, ok, err := s.Meta(ctx, "store_id"); err != nil || ok {
		return id, err
	}
	b := make([]byte, 12)
	rand.Read(b)
	s.lockWriter()
	_, err := s.db.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES('store_id', ?) ON CONFLICT(key) DO NOTHING`, hex.EncodeToString(b))
	s.wmu.Unlock()
	if err != nil {
		return "", fmt.Errorf("store id: %w", mapSQLErr(err))
	}
	id, _, err := s.Meta(ctx, "store_id") // another process may have won
	return id, err
}

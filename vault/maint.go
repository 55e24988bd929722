package vault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// Maintenance: what a store and its vaults hold (Stats), giving freed
// pages back to the file system (Compact), applying retention
// (Retain), and forgetting old audit events (AuditClear).

// VaultStats is what one vault holds.
type VaultStats struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Files       int64  `json:"files"`
	Dirs        int64  `json:"dirs"`
	Checkpoints int64  `json:"checkpoints"`
	// AutoCheckpoints counts the auto-checkpoints among Checkpoints.
	AutoCheckpoints int64 `json:"auto_checkpoints"`
	// Versions counts the file versions the vault recorded itself (a
	// fork also sees its source's up to the fork point).
	Versions int64 `json:"versions"`
	// LogicalBytes is the live tree's file sizes; UniqueBytes the
	// distinct content it references (Info.StoredBytes).
	LogicalBytes int64 `json:"logical_bytes"`
	UniqueBytes  int64 `json:"unique_bytes"`
	AuditEvents  int64 `json:"audit_events"`
}

// StoreStats is what the whole store holds.
type StoreStats struct {
	Vaults int64 `json:"vaults"`
	// Files and Dirs sum the vaults' live trees.
	Files    int64 `json:"files"`
	Dirs     int64 `json:"dirs"`
	Nodes    int64 `json:"nodes"`
	Versions int64 `json:"versions"`
	// Chunks and ChunkBytes are the content, stored once per hash.
	Chunks     int64 `json:"chunks"`
	ChunkBytes int64 `json:"chunk_bytes"`
	// LogicalBytes sums the live trees' file sizes over every vault.
	LogicalBytes int64 `json:"logical_bytes"`
	AuditEvents  int64 `json:"audit_events"`
	// Orphans is what GC would free now.
	Orphans GCStats `json:"orphans"`
	// DBBytes is the database file, WALBytes its write-ahead log,
	// FreeBytes the pages inside the file that Compact would give back.
	DBBytes   int64 `json:"db_bytes"`
	WALBytes  int64 `json:"wal_bytes"`
	FreeBytes int64 `json:"free_bytes"`
}

// Stats describes the vault.
func (v *Vault) Stats(ctx context.Context) (VaultStats, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (VaultStats, error) {
		st := VaultStats{Namespace: t.v.namespace, Name: t.v.name, Files: t.v.files, Dirs: t.v.dirs, LogicalBytes: t.v.bytes}
		if err := t.row(`SELECT count(*), coalesce(sum(auto), 0) FROM checkpoints WHERE vault=? AND substr(name, 1, 1) != '.'`, t.v.id).Scan(&st.Checkpoints, &st.AutoCheckpoints); err != nil {
			return st, mapSQLErr(err)
		}
		if err := t.row(`SELECT count(*) FROM versions WHERE vault=?`, t.v.id).Scan(&st.Versions); err != nil {
			return st, mapSQLErr(err)
		}
		if err := t.row(`SELECT count(*) FROM audit WHERE vault_id=?`, t.v.id).Scan(&st.AuditEvents); err != nil {
			return st, mapSQLErr(err)
		}
		var err error
		st.UniqueBytes, err = t.storedBytes()
		return st, err
	})
}

// Stats describes the store. Counting orphans runs GC's mark in a
// transaction it rolls back (GCDryRun).
func (s *Store) Stats(ctx context.Context) (StoreStats, error) {
	st, err := read(ctx, s, "", "", func(t *Tx) (StoreStats, error) {
		var st StoreStats
		for _, q := range []struct {
			sql string
			out []any
		}{
			{`SELECT count(*), coalesce(sum(bytes), 0), coalesce(sum(files), 0), coalesce(sum(dirs), 0) FROM vaults`, []any{&st.Vaults, &st.LogicalBytes, &st.Files, &st.Dirs}},
			{`SELECT count(*) FROM nodes`, []any{&st.Nodes}},
			{`SELECT count(*) FROM versions`, []any{&st.Versions}},
			{`SELECT count(*), coalesce(sum(length(data)), 0) FROM chunks`, []any{&st.Chunks, &st.ChunkBytes}},
			{`SELECT count(*) FROM audit`, []any{&st.AuditEvents}},
			{`SELECT page_size * freelist_count FROM pragma_page_size, pragma_freelist_count`, []any{&st.FreeBytes}},
		} {
			if err := t.row(q.sql).Scan(q.out...); err != nil {
				return st, fmt.Errorf("stats: %w", mapSQLErr(err))
			}
		}
		return st, nil
	})
	if err != nil {
		return st, err
	}
	if st.Orphans, err = s.GCDryRun(ctx); err != nil {
		return st, err
	}
	st.DBBytes, st.WALBytes = s.fileSizes()
	return st, nil
}

func (s *Store) fileSizes() (db, wal int64) {
	if fi, err := os.Stat(s.path); err == nil {
		db = fi.Size()
	}
	if fi, err := os.Stat(s.path + "-wal"); err == nil {
		wal = fi.Size()
	}
	return db, wal
}

// CompactResult says what Compact gave back to the file system.
type CompactResult struct {
	BeforeBytes int64 `json:"before_bytes"`
	AfterBytes  int64 `json:"after_bytes"`
	FreedBytes  int64 `json:"freed_bytes"`
}

// Compact rewrites the database without its free pages (VACUUM) and
// truncates the write-ahead log; sizes count the database and its log.
// Writers of this process queue meanwhile; readers go on. It needs free
// disk space about the size of the database.
func (s *Store) Compact(ctx context.Context) (CompactResult, error) {
	s.lockWriter()
	defer s.wmu.Unlock()
	db, wal := s.fileSizes()
	r := CompactResult{BeforeBytes: db + wal}
	c, err := s.db.Conn(ctx)
	if err != nil {
		return r, mapSQLErr(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `VACUUM`); err != nil {
		return r, fmt.Errorf("compact: %w", mapSQLErr(err))
	}
	if _, err := c.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return r, fmt.Errorf("compact: checkpoint the log: %w", mapSQLErr(err))
	}
	db, wal = s.fileSizes()
	r.AfterBytes = db + wal
	r.FreedBytes = max(0, r.BeforeBytes-r.AfterBytes)
	return r, nil
}

// OptimizeIndex merges the full-text index's segments into one (FTS5's
// optimize): searches read fewer b-trees afterwards.
func (s *Store) OptimizeIndex(ctx context.Context) error {
	_, _, err := write(ctx, s, "", "", Meta{}, "search.optimize", false, func(t *Tx) (struct{}, error) {
		_, err := t.execText(`INSERT INTO fts(fts) VALUES('optimize')`)
		return struct{}{}, err
	})
	return err
}

// RetainResult says what Retain dropped.
type RetainResult struct {
	Versions        int64 `json:"versions"`
	AutoCheckpoints int64 `json:"auto_checkpoints"`
}

// Retain applies the vault's retention settings now: file versions
// beyond its history settings (keep, max_age) and auto-checkpoints beyond
// its checkpoint settings (auto_keep, auto_max_age). Writes apply them as
// they go; this catches up on what only time made old. Content is freed
// by the next GC.
func (v *Vault) Retain(ctx context.Context, meta Meta) (RetainResult, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "vault.retain", true, func(t *Tx) (RetainResult, error) {
		var r RetainResult
		hs, err := t.historySettings()
		if err != nil {
			return r, err
		}
		p, err := t.prune(hs.Keep, hs.MaxAge, false)
		if err != nil {
			return r, err
		}
		r.Versions = p.Versions
		if r.AutoCheckpoints, err = t.pruneAuto(""); err != nil {
			return r, err
		}
		if r.Versions > 0 {
			t.audit("history.prune", "/", map[string]any{"keep": hs.Keep, "older_than": hs.MaxAge.String(), "versions": r.Versions})
		}
		return r, nil
	})
	return r, err
}

// AuditGrace is how recent an audit event AuditClear always keeps: the
// audit stream's publisher and other processes' mounts follow the log,
// and may be that far behind.
const AuditGrace = time.Minute

// AuditClear deletes the vault's audit events from before before, except
// those younger than AuditGrace and the vault's newest event (event ids
// must never be reused: followers go by id). With dryRun it only counts.
func (v *Vault) AuditClear(ctx context.Context, before time.Time, dryRun bool, meta Meta) (int64, error) {
	const doomed = `FROM audit WHERE vault_id=?1 AND time < ?2 AND id < (SELECT max(id) FROM audit WHERE vault_id=?1)`
	cut := func(t *Tx) int64 { return min(before.UnixNano(), t.now-int64(AuditGrace)) }
	if dryRun {
		return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (int64, error) {
			var n int64
			err := t.row(`SELECT count(*) `+doomed, t.v.id, cut(t)).Scan(&n)
			return n, mapSQLErr(err)
		})
	}
	n, _, err := write(ctx, v.s, v.namespace, v.name, meta, "audit.clear", true, func(t *Tx) (int64, error) {
		res, err := t.exec(`DELETE `+doomed, t.v.id, cut(t))
		if err != nil {
			return 0, fmt.Errorf("audit clear: %w", err)
		}
		n, _ := res.RowsAffected()
		t.audit("audit.clear", "/", map[string]any{"before": before.UTC().Format(time.RFC3339Nano), "events": n})
		return n, nil
	})
	return n, err
}

// MaintainOptions configure Maintain.
type MaintainOptions struct {
	// Sweep deletes the expired vaults that owned says are this
	// process's (nil: no sweep; SweepExpired).
	Sweep func(Expired) bool
	// Progress, if set, is called before each step with its name and
	// its place among total steps.
	Progress func(step string, done, total int)
}

// MaintainResult says what Maintain did.
type MaintainResult struct {
	Vaults          int64
	Versions        int64
	AutoCheckpoints int64
	Expired         []string
	Freed           GCStats
	Compact         CompactResult
}

// Maintain runs every maintenance step on the store, in the order that
// frees the most: the expired vaults go, every vault's retention is
// applied (Retain), GC frees what nothing references any more, the
// full-text index is optimized, and Compact gives the space back.
func (s *Store) Maintain(ctx context.Context, o MaintainOptions, meta Meta) (MaintainResult, error) {
	var r MaintainResult
	step := func(name string, done, total int) {
		if o.Progress != nil {
			o.Progress(name, done, total)
		}
	}
	if o.Sweep != nil {
		step("sweep expired vaults", 0, 1)
		gone, err := s.SweepExpired(ctx, o.Sweep)
		if err != nil {
			return r, err
		}
		r.Expired = gone
	}
	names, err := read(ctx, s, "", "", func(t *Tx) ([][2]string, error) {
		rows, err := t.query(`SELECT namespace, name FROM vaults ORDER BY namespace, name`)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		defer rows.Close()
		var out [][2]string
		for rows.Next() {
			var n [2]string
			if err := rows.Scan(&n[0], &n[1]); err != nil {
				return nil, mapSQLErr(err)
			}
			out = append(out, n)
		}
		return out, mapSQLErr(rows.Err())
	})
	if err != nil {
		return r, err
	}
	total := len(names) + 3
	for i, n := range names {
		step("retention "+n[0]+"/"+n[1], i, total)
		rr, err := s.Vault(n[0], n[1]).Retain(ctx, meta)
		if errors.Is(err, ErrVaultNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return r, err
		}
		r.Vaults++
		r.Versions += rr.Versions
		r.AutoCheckpoints += rr.AutoCheckpoints
	}
	step("gc", len(names), total)
	if r.Freed, err = s.GC(ctx); err != nil {
		return r, err
	}
	step("optimize the search index", len(names)+1, total)
	if err := s.OptimizeIndex(ctx); err != nil {
		return r, err
	}
	step("compact", len(names)+2, total)
	r.Compact, err = s.Compact(ctx)
	return r, err
}

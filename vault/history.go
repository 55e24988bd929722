package vault

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
)

// File history: every committed write of a regular file (WriteFile,
// WriteAt, Truncate, ImportDir; through the API, the mount and exec alike)
// records a version of the path: its size and chunk list, so a version
// costs a row, not a copy of content. Several writes of one path in one
// transaction make one version; with a coalescing window, so do writes in
// later transactions within that window of the version's creation (the
// mount commits a file on each close and on a timer).
//
// A fork shares its source's history up to the fork point: history_links
// names, for each vault, the vaults whose versions it sees and the last
// version id it sees of each. Version numbers count per path over that
// shared history, so a fork's next version continues its source's
// numbering. Garbage collection keeps every chunk a version lists.
const historySchema = `
CREATE TABLE IF NOT EXISTS versions(
	id INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: history_links.cut compares ids
	vault INTEGER NOT NULL,
	path TEXT NOT NULL,
	version INTEGER NOT NULL,
	size INTEGER NOT NULL,
	chunks BLOB,
	created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS versions_path ON versions(path, vault, id);
CREATE TABLE IF NOT EXISTS history_links(
	vault INTEGER NOT NULL,
	ancestor INTEGER NOT NULL,
	cut INTEGER NOT NULL,
	PRIMARY KEY(vault, ancestor)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_settings(
	vault INTEGER PRIMARY KEY,
	keep INTEGER NOT NULL DEFAULT 0,
	max_age INTEGER NOT NULL DEFAULT 0,
	coalesce INTEGER NOT NULL DEFAULT 0
);
`

// HistorySettings are a vault's history retention and coalescing. Zero
// values mean: keep every version, forever, one per transaction.
type HistorySettings struct {
	// Keep is how many versions of each path are kept (0: all).
	Keep int64 `json:"keep"`
	// MaxAge drops versions older than this (0: none).
	MaxAge time.Duration `json:"max_age"`
	// Coalesce folds a write into the path's latest version when that
	// version is younger than this (0: one version per transaction).
	Coalesce time.Duration `json:"coalesce"`
}

// Version is one recorded state of a file.
type Version struct {
	Version   int64     `json:"version"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
	// Hash is the SHA-256 of the version's chunk list: equal contents
	// have equal hashes, and it is computed without reading content.
	Hash   string `json:"hash"`
	id     int64
	chunks []byte
}

// historySources lists (vault, cut) pairs whose versions vault ?1 sees:
// its own, and its ancestors' up to the fork points.
const historySources = `WITH src(vault, cut) AS (SELECT ?1, 9223372036854775807 UNION ALL SELECT ancestor, cut FROM history_links WHERE vault=?1)`

func (t *Tx) historySettings() (HistorySettings, error) {
	if t.hist != nil {
		return *t.hist, nil
	}
	var hs HistorySettings
	var age, co int64
	err := t.row(`SELECT keep, max_age, coalesce FROM history_settings WHERE vault=?`, t.v.id).Scan(&hs.Keep, &age, &co)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return hs, mapSQLErr(err)
	}
	hs.MaxAge, hs.Coalesce = time.Duration(age), time.Duration(co)
	t.hist = &hs
	return hs, nil
}

// recordVersion records the state of file node id as a version of path
// p, or folds it into the version this transaction (or the coalescing
// window) already made, and queues the node for the full-text index
// (data: its whole content, when the caller has it).
func (t *Tx) recordVersion(p string, id int64, data []byte) error {
	const fold = `UPDATE versions SET size=n.size, chunks=n.chunks FROM (SELECT size, chunks FROM nodes WHERE id=?) AS n WHERE versions.id=?`
	t.noteIndex(id, data)
	if vid, ok := t.versions[p]; ok {
		_, err := t.exec(fold, id, vid)
		return err
	}
	hs, err := t.historySettings()
	if err != nil {
		return err
	}
	if t.versions == nil {
		t.versions = map[string]int64{}
	}
	if hs.Coalesce > 0 {
		var vid, at int64
		err := t.row(`SELECT id, created_at FROM versions WHERE path=? AND vault=? ORDER BY id DESC LIMIT 1`, p, t.v.id).Scan(&vid, &at)
		if err == nil && t.now-at < int64(hs.Coalesce) {
			t.versions[p] = vid
			_, err := t.exec(fold, id, vid)
			return err
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return mapSQLErr(err)
		}
	}
	res, err := t.exec(historySources+` INSERT INTO versions(vault, path, version, size, chunks, created_at)
		SELECT ?1, ?2, 1 + coalesce((SELECT max(v.version) FROM src JOIN versions v ON v.id = (SELECT max(id) FROM versions WHERE path = ?2 AND vault = src.vault AND id <= src.cut)), 0), size, chunks, ?3 FROM nodes WHERE id=?4`,
		t.v.id, p, t.now, id)
	if err != nil {
		return fmt.Errorf("record version of %s: %w", p, err)
	}
	vid, err := res.LastInsertId()
	if err != nil {
		return err
	}
	t.versions[p] = vid
	return t.retain(p, hs)
}

// retain drops this vault's own versions of p that its settings no longer
// keep; the latest version always stays.
func (t *Tx) retain(p string, hs HistorySettings) error {
	if hs.Keep > 0 {
		if _, err := t.exec(`DELETE FROM versions WHERE path=?1 AND vault=?2 AND id NOT IN (SELECT id FROM versions WHERE path=?1 AND vault=?2 ORDER BY id DESC LIMIT ?3)`, p, t.v.id, hs.Keep); err != nil {
			return err
		}
	}
	if hs.MaxAge > 0 {
		if _, err := t.exec(`DELETE FROM versions WHERE path=?1 AND vault=?2 AND created_at < ?3 AND id != (SELECT max(id) FROM versions WHERE path=?1 AND vault=?2)`, p, t.v.id, t.now-int64(hs.MaxAge)); err != nil {
			return err
		}
	}
	return nil
}

// linkHistory makes vault dst share src's history: src's versions up to
// cut, and what src itself shares.
func (t *Tx) linkHistory(dst, src, cut int64) error {
	_, err := t.exec(`INSERT INTO history_links(vault, ancestor, cut) SELECT ?1, ?2, ?3 UNION ALL SELECT ?1, ancestor, min(cut, ?3) FROM history_links WHERE vault=?2`, dst, src, cut)
	if err != nil {
		return fmt.Errorf("link history: %w", err)
	}
	return nil
}

// lastVersionID is the id of the latest version recorded up to time at
// (nanoseconds; math.MaxInt64 for now). Versions are appended in time
// order, so the scan from the newest stops at the first one old enough:
// a fork costs the same however long the history.
func (t *Tx) lastVersionID(at int64) (int64, error) {
	var id int64
	err := t.row(`SELECT coalesce((SELECT id FROM versions WHERE created_at <= ? ORDER BY id DESC LIMIT 1), 0)`, at).Scan(&id)
	return id, mapSQLErr(err)
}

// dropHistorySQL is dropHistory for the vault named ?1/?2, run on a raw
// connection (an import replacing its outdated copy).
var dropHistorySQL = []string{
	`DELETE FROM history_links WHERE vault=(SELECT id FROM vaults WHERE namespace=?1 AND name=?2)`,
	`DELETE FROM history_settings WHERE vault=(SELECT id FROM vaults WHERE namespace=?1 AND name=?2)`,
	`DELETE FROM versions WHERE vault=(SELECT id FROM vaults WHERE namespace=?1 AND name=?2)
		AND id > coalesce((SELECT max(cut) FROM history_links WHERE ancestor=versions.vault), 0)`,
}

// dropHistory forgets a deleted vault's history, except the versions that
// forks of it still share; and the versions of vaults deleted earlier that
// only this one still shared.
func (t *Tx) dropHistory(id int64) error {
	for _, q := range []string{
		`DELETE FROM history_links WHERE vault=?1`,
		`DELETE FROM history_settings WHERE vault=?1`,
		`DELETE FROM versions WHERE (vault=?1 OR vault NOT IN (SELECT id FROM vaults))
			AND id > coalesce((SELECT max(cut) FROM history_links WHERE ancestor=versions.vault), 0)`,
	} {
		if _, err := t.exec(q, id); err != nil {
			return fmt.Errorf("drop history: %w", err)
		}
	}
	return nil
}

// Versions returns the versions of path p, oldest first; with limit > 0 only
// the latest limit of them. Settings that narrow retention apply to what
// a fork shares too.
func (t *Tx) Versions(p string, limit int) ([]Version, error) {
	comps, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	clean := JoinPath(comps)
	hs, err := t.historySettings()
	if err != nil {
		return nil, err
	}
	minAt := int64(math.MinInt64)
	if hs.MaxAge > 0 {
		minAt = t.now - int64(hs.MaxAge)
	}
	rows, err := t.query(historySources+` SELECT v.id, v.version, v.size, v.chunks, v.created_at FROM versions v JOIN src ON v.vault = src.vault AND v.id <= src.cut WHERE v.path = ?2 ORDER BY v.id`, t.v.id, clean)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		var v Version
		var at int64
		if err := rows.Scan(&v.id, &v.Version, &v.Size, &v.chunks, &at); err != nil {
			return nil, err
		}
		v.CreatedAt = time.Unix(0, at).UTC()
		h := sha256.Sum256(v.chunks)
		v.Hash = hex.EncodeToString(h[:])
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Retention as this vault sees it; the latest version always stays.
	start := 0
	if hs.Keep > 0 && int64(len(out)) > hs.Keep {
		start = len(out) - int(hs.Keep)
	}
	for start < len(out)-1 && out[start].CreatedAt.UnixNano() < minAt {
		start++
	}
	out = out[start:]
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

// version finds version n of p (0: the latest).
func (t *Tx) version(p string, n int64) (Version, error) {
	vs, err := t.Versions(p, 0)
	if err != nil {
		return Version{}, err
	}
	if len(vs) == 0 {
		return Version{}, pathErr("history", p, fmt.Errorf("no versions: %w", ErrNotFound))
	}
	if n == 0 {
		return vs[len(vs)-1], nil
	}
	for _, v := range vs {
		if v.Version == n {
			return v, nil
		}
	}
	return Version{}, pathErr("history", p, fmt.Errorf("version %d: %w", n, ErrNotFound))
}

// ReadVersion returns the content of version n of p (0: the latest).
func (t *Tx) ReadVersion(p string, n int64) ([]byte, Version, error) {
	v, err := t.version(p, n)
	if err != nil {
		return nil, v, err
	}
	data, err := t.content(&node{kind: KindFile, size: v.Size, chunks: v.chunks})
	return data, v, err
}

// Checkout writes version n of p back as p's content, which records a new
// version.
func (t *Tx) Checkout(p string, n int64) (WriteResult, Version, error) {
	data, v, err := t.ReadVersion(p, n)
	if err != nil {
		return WriteResult{}, v, err
	}
	r, err := t.WriteFile(p, data, WriteOptions{Parents: true})
	return r, v, err
}

// Revert writes the version before p's latest back as p's content.
func (t *Tx) Revert(p string) (WriteResult, Version, error) {
	vs, err := t.Versions(p, 2)
	if err != nil {
		return WriteResult{}, Version{}, err
	}
	if len(vs) < 2 {
		return WriteResult{}, Version{}, pathErr("revert", p, fmt.Errorf("no earlier version: %w", ErrNotFound))
	}
	return t.Checkout(p, vs[0].Version)
}

// SetHistory changes the vault's history settings and applies them to
// the versions it holds.
func (t *Tx) SetHistory(hs HistorySettings) (HistorySettings, error) {
	if hs.Keep < 0 || hs.MaxAge < 0 || hs.Coalesce < 0 {
		return hs, fmt.Errorf("history settings must not be negative: %w", ErrInvalidArgument)
	}
	if _, err := t.exec(`INSERT INTO history_settings(vault, keep, max_age, coalesce) VALUES(?,?,?,?) ON CONFLICT(vault) DO UPDATE SET keep=excluded.keep, max_age=excluded.max_age, coalesce=excluded.coalesce`,
		t.v.id, hs.Keep, int64(hs.MaxAge), int64(hs.Coalesce)); err != nil {
		return hs, err
	}
	t.hist = &hs
	_, err := t.prune(hs.Keep, hs.MaxAge, false)
	t.audit("history.set", "/", map[string]any{"keep": hs.Keep, "max_age": hs.MaxAge.String(), "coalesce": hs.Coalesce.String()})
	return hs, err
}

// History returns the vault's history settings.
func (t *Tx) History() (HistorySettings, error) { return t.historySettings() }

// PruneResult says what Prune removed (or, dry, would remove).
type PruneResult struct {
	Versions int64 `json:"versions"`
	Paths    int64 `json:"paths"`
	DryRun   bool  `json:"dry_run"`
}

// Prune drops this vault's own versions beyond the latest keep of each
// path (keep 0: no limit) and those older than olderThan (0: none); the
// latest version of each path always stays. Versions that forks share
// stay for them: a fork keeps its view of history.
func (t *Tx) Prune(keep int64, olderThan time.Duration, dryRun bool) (PruneResult, error) {
	if keep < 0 || olderThan < 0 {
		return PruneResult{}, fmt.Errorf("prune: keep and age must not be negative: %w", ErrInvalidArgument)
	}
	if keep == 0 && olderThan == 0 {
		return PruneResult{}, fmt.Errorf("prune needs --keep or --older-than: %w", ErrInvalidArgument)
	}
	r, err := t.prune(keep, olderThan, dryRun)
	if err == nil && !dryRun {
		t.audit("history.prune", "/", map[string]any{"keep": keep, "older_than": olderThan.String(), "versions": r.Versions})
	}
	return r, err
}

func (t *Tx) prune(keep int64, olderThan time.Duration, dryRun bool) (PruneResult, error) {
	r := PruneResult{DryRun: dryRun}
	if keep == 0 && olderThan == 0 {
		return r, nil
	}
	if keep == 0 {
		keep = math.MaxInt64
	}
	minAt := int64(math.MinInt64)
	if olderThan > 0 {
		minAt = t.now - int64(olderThan)
	}
	const doomed = `SELECT id, path FROM (SELECT id, path, created_at, row_number() OVER (PARTITION BY path ORDER BY id DESC) AS rn FROM versions WHERE vault=?1)
		WHERE rn > 1 AND (rn > ?2 OR created_at < ?3)
		AND id > coalesce((SELECT max(cut) FROM history_links WHERE ancestor=?1), 0)`
	if err := t.row(`SELECT count(*), count(DISTINCT path) FROM (`+doomed+`)`, t.v.id, keep, minAt).Scan(&r.Versions, &r.Paths); err != nil {
		return r, mapSQLErr(err)
	}
	if dryRun || r.Versions == 0 {
		return r, nil
	}
	_, err := t.exec(`DELETE FROM versions WHERE id IN (SELECT id FROM (`+doomed+`))`, t.v.id, keep, minAt)
	return r, err
}

// Versions returns the versions of path p, oldest first (limit > 0: the latest
// limit).
func (v *Vault) Versions(ctx context.Context, p string, limit int) ([]Version, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]Version, error) { return t.Versions(p, limit) })
}

// ReadVersion returns the content of version n of p (0: the latest).
func (v *Vault) ReadVersion(ctx context.Context, p string, n int64) ([]byte, Version, error) {
	type res struct {
		data []byte
		v    Version
	}
	r, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (res, error) {
		data, ver, err := t.ReadVersion(p, n)
		return res{data, ver}, err
	})
	return r.data, r.v, err
}

// Checkout writes version n of p back as p's content (a new version).
func (v *Vault) Checkout(ctx context.Context, p string, n int64, meta Meta) (WriteResult, Version, error) {
	type res struct {
		W WriteResult
		V Version
	}
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "history.checkout", true, func(t *Tx) (res, error) {
		w, ver, err := t.Checkout(p, n)
		return res{w, ver}, err
	})
	return r.W, r.V, err
}

// Revert writes the version before p's latest back as p's content.
func (v *Vault) Revert(ctx context.Context, p string, meta Meta) (WriteResult, Version, error) {
	type res struct {
		W WriteResult
		V Version
	}
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "history.revert", true, func(t *Tx) (res, error) {
		w, ver, err := t.Revert(p)
		return res{w, ver}, err
	})
	return r.W, r.V, err
}

// SetHistory changes the vault's history settings.
func (v *Vault) SetHistory(ctx context.Context, hs HistorySettings, meta Meta) (HistorySettings, error) {
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "history.set", true, func(t *Tx) (HistorySettings, error) {
		return t.SetHistory(hs)
	})
	return r, err
}

// History returns the vault's history settings.
func (v *Vault) History(ctx context.Context) (HistorySettings, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (HistorySettings, error) { return t.History() })
}

// Prune drops old versions (see Tx.Prune); dryRun only counts them.
func (v *Vault) Prune(ctx context.Context, keep int64, olderThan time.Duration, dryRun bool, meta Meta) (PruneResult, error) {
	if dryRun {
		return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (PruneResult, error) { return t.Prune(keep, olderThan, true) })
	}
	r, _, err := write(ctx, v.s, v.namespace, v.name, meta, "history.prune", true, func(t *Tx) (PruneResult, error) {
		return t.Prune(keep, olderThan, false)
	})
	return r, err
}

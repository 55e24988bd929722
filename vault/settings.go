package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Per-vault settings: retention of auto-checkpoints, how the quota counts
// bytes, and when the vault expires. A NULL column takes the store's
// default (Options.Defaults); an expiry is per vault only.
const settingsSchema = `
CREATE TABLE IF NOT EXISTS vault_settings(
	vault INTEGER PRIMARY KEY,
	auto_keep INTEGER,    -- NULL: the store's default
	auto_max_age INTEGER, -- nanoseconds; NULL: the store's default
	quota_mode TEXT,      -- NULL: the store's default
	expires_at INTEGER,   -- unix nanoseconds; NULL: never
	replication TEXT      -- NULL: the store's default
);
CREATE INDEX IF NOT EXISTS vault_settings_expiry ON vault_settings(expires_at) WHERE expires_at IS NOT NULL;
`

// Quota modes: what max_size_mb counts.
const (
	// QuotaLogical counts the logical size of the live tree's files
	// (holes included), what `ls -l` adds up. The default.
	QuotaLogical = "logical"
	// QuotaUnique counts the bytes of the distinct chunks reachable from
	// the live tree: content stored once however many files, forks or
	// checkpoints share it, holes free (Info.StoredBytes).
	QuotaUnique = "unique"
)

// Replication modes: when a fleet acknowledges a change of the vault
// (docs/decisions.md §30). The vault only stores the setting; a fleet
// worker acts on it.
const (
	// ReplicationSync: a change is answered once the fleet's change log
	// holds it. The default.
	ReplicationSync = "sync"
	// ReplicationAsync: a change is answered at once and appended to the
	// change log right after, before the vault's next request.
	ReplicationAsync = "async"
	// ReplicationCheckpoint: no change log; the vault is pushed to the
	// fleet after checkpoints, creates, forks and a graceful stop.
	ReplicationCheckpoint = "checkpoint"
)

// ValidReplication accepts the replication modes and "" (the default).
func ValidReplication(m string) error {
	switch m {
	case "", ReplicationSync, ReplicationAsync, ReplicationCheckpoint:
		return nil
	}
	return fmt.Errorf("replication %q: want %s, %s or %s: %w", m, ReplicationSync, ReplicationAsync, ReplicationCheckpoint, ErrInvalidArgument)
}

// Defaults are the store-wide values of the settings a vault leaves
// unset (config: checkpoints.auto_keep, checkpoints.auto_max_age,
// quota.mode).
type Defaults struct {
	// AutoKeep is how many auto-checkpoints a vault keeps (0: all).
	AutoKeep int64
	// AutoMaxAge drops auto-checkpoints older than this (0: never).
	AutoMaxAge time.Duration
	// QuotaMode is QuotaLogical ("" too) or QuotaUnique.
	QuotaMode string
	// Replication is a Replication* mode ("": ReplicationSync).
	Replication string
}

// Validate checks d's values.
func (d Defaults) Validate() error {
	if d.AutoKeep < 0 || d.AutoMaxAge < 0 {
		return fmt.Errorf("auto-checkpoint retention must not be negative: %w", ErrInvalidArgument)
	}
	if err := ValidReplication(d.Replication); err != nil {
		return err
	}
	return ValidQuotaMode(d.QuotaMode)
}

// ValidQuotaMode accepts QuotaLogical, QuotaUnique and "" (the default).
func ValidQuotaMode(m string) error {
	switch m {
	case "", QuotaLogical, QuotaUnique:
		return nil
	}
	return fmt.Errorf("quota mode %q: want %s or %s: %w", m, QuotaLogical, QuotaUnique, ErrInvalidArgument)
}

// Settings are a vault's own settings; a nil field (or "" mode) takes
// the store's default.
type Settings struct {
	AutoKeep   *int64
	AutoMaxAge *time.Duration
	QuotaMode  string
	// ExpiresAt is when the vault is deleted by its owner's sweep
	// (SweepExpired); nil: never.
	ExpiresAt *time.Time
	// Replication is a Replication* mode, "" for the store's default.
	Replication string
}

// Effective are a vault's settings with the store's defaults filled in.
type Effective struct {
	AutoKeep   int64
	AutoMaxAge time.Duration
	QuotaMode  string
	ExpiresAt  *time.Time
	// Replication is the vault's replication mode.
	Replication string
	// Own is what the vault sets itself.
	Own Settings
}

func (t *Tx) settings() (Settings, error) {
	if t.set != nil {
		return *t.set, nil
	}
	var st Settings
	var keep, age, exp sql.NullInt64
	var mode, repl sql.NullString
	err := t.row(`SELECT auto_keep, auto_max_age, quota_mode, expires_at, replication FROM vault_settings WHERE vault=?`, t.v.id).Scan(&keep, &age, &mode, &exp, &repl)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return st, mapSQLErr(err)
	}
	st.AutoKeep = nullToPtr(keep)
	if age.Valid {
		d := time.Duration(age.Int64)
		st.AutoMaxAge = &d
	}
	st.QuotaMode = mode.String
	st.Replication = repl.String
	if exp.Valid {
		at := time.Unix(0, exp.Int64).UTC()
		st.ExpiresAt = &at
	}
	t.set = &st
	return st, nil
}

func (t *Tx) effective() (Effective, error) {
	st, err := t.settings()
	if err != nil {
		return Effective{}, err
	}
	d := t.s.defaults
	e := Effective{AutoKeep: d.AutoKeep, AutoMaxAge: d.AutoMaxAge, QuotaMode: d.QuotaMode, ExpiresAt: st.ExpiresAt, Own: st}
	if st.AutoKeep != nil {
		e.AutoKeep = *st.AutoKeep
	}
	if st.AutoMaxAge != nil {
		e.AutoMaxAge = *st.AutoMaxAge
	}
	if st.QuotaMode != "" {
		e.QuotaMode = st.QuotaMode
	}
	if e.QuotaMode == "" {
		e.QuotaMode = QuotaLogical
	}
	e.Replication = d.Replication
	if st.Replication != "" {
		e.Replication = st.Replication
	}
	if e.Replication == "" {
		e.Replication = ReplicationSync
	}
	return e, nil
}

// putSettings stores st as the vault's own settings.
func (t *Tx) putSettings(st Settings) error {
	var age, exp, mode, repl any
	if st.AutoMaxAge != nil {
		age = int64(*st.AutoMaxAge)
	}
	if st.ExpiresAt != nil {
		exp = st.ExpiresAt.UnixNano()
	}
	if st.QuotaMode != "" {
		mode = st.QuotaMode
	}
	if st.Replication != "" {
		repl = st.Replication
	}
	if _, err := t.exec(`INSERT INTO vault_settings(vault, auto_keep, auto_max_age, quota_mode, expires_at, replication) VALUES(?,?,?,?,?,?)
		ON CONFLICT(vault) DO UPDATE SET auto_keep=excluded.auto_keep, auto_max_age=excluded.auto_max_age, quota_mode=excluded.quota_mode, expires_at=excluded.expires_at, replication=excluded.replication`,
		t.v.id, ptrToNull(st.AutoKeep), age, mode, exp, repl); err != nil {
		return fmt.Errorf("vault settings: %w", err)
	}
	t.set = &st
	return nil
}

// Settings returns the vault's settings, defaults filled in.
func (v *Vault) Settings(ctx context.Context) (Effective, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (Effective, error) { return t.effective() })
}

// SetSettings replaces the vault's own settings with st (nil fields: the
// store's default) and applies the retention at once.
func (v *Vault) SetSettings(ctx context.Context, st Settings, meta Meta) (Effective, error) {
	if st.AutoKeep != nil && *st.AutoKeep < 0 || st.AutoMaxAge != nil && *st.AutoMaxAge < 0 {
		return Effective{}, fmt.Errorf("auto-checkpoint retention must not be negative: %w", ErrInvalidArgument)
	}
	if err := ValidQuotaMode(st.QuotaMode); err != nil {
		return Effective{}, err
	}
	if err := ValidReplication(st.Replication); err != nil {
		return Effective{}, err
	}
	e, _, err := write(ctx, v.s, v.namespace, v.name, meta, "vault.set", true, func(t *Tx) (Effective, error) {
		if err := t.putSettings(st); err != nil {
			return Effective{}, err
		}
		if _, err := t.pruneAuto(""); err != nil {
			return Effective{}, err
		}
		d := map[string]any{"auto_keep": st.AutoKeep, "quota_mode": st.QuotaMode, "replication": st.Replication}
		if st.AutoMaxAge != nil {
			d["auto_max_age"] = st.AutoMaxAge.String()
		}
		if st.ExpiresAt != nil {
			d["expires_at"] = st.ExpiresAt.Format(time.RFC3339Nano)
		}
		t.audit("vault.set", "/", d)
		return t.effective()
	})
	return e, err
}

// pruneAuto deletes the auto-checkpoints the vault's retention no longer
// keeps, except keep (the one just saved): beyond the newest AutoKeep,
// and older than AutoMaxAge. Named checkpoints are never touched. Their
// nodes and content are left to the next GC.
func (t *Tx) pruneAuto(keep string) (int64, error) {
	e, err := t.effective()
	if err != nil {
		return 0, err
	}
	if e.AutoKeep == 0 && e.AutoMaxAge == 0 {
		return 0, nil
	}
	limit := e.AutoKeep
	if limit == 0 {
		limit = -1 // SQLite: no limit
	}
	minAt := int64(-1 << 63)
	if e.AutoMaxAge > 0 {
		minAt = t.now - int64(e.AutoMaxAge)
	}
	res, err := t.exec(`DELETE FROM checkpoints WHERE vault=?1 AND auto=1 AND name != ?4 AND substr(name, 1, 1) != '.'
		AND (created_at < ?3 OR name NOT IN (SELECT name FROM checkpoints WHERE vault=?1 AND auto=1 AND substr(name, 1, 1) != '.' ORDER BY created_at DESC, name DESC LIMIT ?2))`,
		t.v.id, limit, minAt, keep)
	if err != nil {
		return 0, fmt.Errorf("prune auto-checkpoints: %w", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		t.audit("checkpoint.prune", "/", map[string]any{"auto": n, "auto_keep": e.AutoKeep, "auto_max_age": e.AutoMaxAge.String()})
	}
	return n, nil
}

// uniqueBound is an upper bound of the vault's unique bytes, known
// without a walk of its tree: this transaction's, or the one the
// store's last committed check left for the vault's current change
// sequence (Store.uniq). A unique-mode quota check walks the tree only
// when the bound does not fit the limit: appends to a vault past its
// logical limit cost a walk once, not once each.
func (t *Tx) uniqueBound() (int64, bool) {
	if t.uniq != nil {
		return *t.uniq, true
	}
	if t.conn == nil {
		return 0, false
	}
	b, ok := t.s.uniq[t.v.id]
	return b.bytes, ok && b.seq == t.v0.seq
}

// quotaMode is the vault's effective quota mode.
func (t *Tx) quotaMode() (string, error) {
	e, err := t.effective()
	return e.QuotaMode, err
}

// ForkOptions are what ForkWith takes besides the names.
type ForkOptions struct {
	// Checkpoint forks that checkpoint's state instead of the live tree.
	Checkpoint string
	// TTL, when positive, makes the fork expire that long after it is
	// made: its owner's next sweep (SweepExpired) deletes it.
	TTL time.Duration
}

// ForkWith is Fork with options; the expiry is set in the fork's own
// transaction, so a fork never exists without it.
func (s *Store) ForkWith(ctx context.Context, ns, src, dst string, o ForkOptions, meta Meta) (ForkResult, error) {
	if o.TTL < 0 {
		return ForkResult{}, fmt.Errorf("fork ttl %v: must not be negative: %w", o.TTL, ErrInvalidArgument)
	}
	return s.fork(ctx, ns, src, dst, o, meta)
}

// Expired is a vault whose expiry passed.
type Expired struct {
	Namespace string
	Name      string
	Worker    string
	ExpiresAt time.Time
}

// Expired lists the vaults whose expiry is at or before now.
func (s *Store) Expired(ctx context.Context) ([]Expired, error) {
	return read(ctx, s, "", "", func(t *Tx) ([]Expired, error) {
		rows, err := t.query(`SELECT v.namespace, v.name, v.worker, s.expires_at FROM vault_settings s JOIN vaults v ON v.id = s.vault WHERE s.expires_at IS NOT NULL AND s.expires_at <= ? ORDER BY s.expires_at`, t.now)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		defer rows.Close()
		var out []Expired
		for rows.Next() {
			var e Expired
			var at int64
			if err := rows.Scan(&e.Namespace, &e.Name, &e.Worker, &at); err != nil {
				return nil, mapSQLErr(err)
			}
			e.ExpiresAt = time.Unix(0, at).UTC()
			out = append(out, e)
		}
		return out, mapSQLErr(rows.Err())
	})
}

// SweepExpired deletes every vault of the store whose expiry passed and
// that owned says this process owns (nil: every one), and returns their
// names ("namespace/name"). A vault made again since under the same name
// has no expiry of its own and is left alone: Delete re-checks the expiry
// in its transaction.
func (s *Store) SweepExpired(ctx context.Context, owned func(Expired) bool) ([]string, error) {
	ex, err := s.Expired(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ex {
		if owned != nil && !owned(e) {
			continue
		}
		err := s.DeleteExpired(ctx, e.Namespace, e.Name, Meta{Actor: "ttl"})
		switch {
		case errors.Is(err, ErrNotExpired), errors.Is(err, ErrVaultNotFound):
		case err != nil:
			return out, fmt.Errorf("sweep %s/%s: %w", e.Namespace, e.Name, err)
		default:
			out = append(out, e.Namespace+"/"+e.Name)
		}
	}
	return out, nil
}

// ErrNotExpired: DeleteExpired found the vault without an expiry, or
// with one still to come.
var ErrNotExpired = fmt.Errorf("vault has not expired: %w", ErrConflict)

// DeleteExpired deletes the vault if its expiry has passed, checked in
// the delete's own transaction (else ErrNotExpired): a sweep that saw it
// expired must not delete it once its TTL was changed or cleared, or the
// name was deleted and made again, meanwhile.
func (s *Store) DeleteExpired(ctx context.Context, ns, name string, meta Meta) error {
	return s.deleteIf(ctx, ns, name, meta, expiredCheck(name))
}

// expiredCheck fails a delete of vault name that has not expired.
func expiredCheck(name string) func(t *Tx) error {
	return func(t *Tx) error {
		st, err := t.settings()
		if err != nil {
			return err
		}
		if st.ExpiresAt == nil || st.ExpiresAt.UnixNano() > t.now {
			return fmt.Errorf("vault %q: %w", name, ErrNotExpired)
		}
		t.audit("vault.expired", "/", map[string]any{"expires_at": st.ExpiresAt.Format(time.RFC3339Nano)})
		return nil
	}
}

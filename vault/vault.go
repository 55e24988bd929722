package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Quota limits a vault. A nil field is unlimited.
type Quota struct {
	MaxSizeMB     *int64 `json:"max_size_mb"`
	MaxFiles      *int64 `json:"max_files"`
	MaxFileSizeMB *int64 `json:"max_file_size_mb"`
}

// Info describes a vault.
type Info struct {
	Name        string    `json:"name"`
	Namespace   string    `json:"namespace"`
	CreatedAt   time.Time `json:"created_at"`
	Files       int64     `json:"files"`
	Dirs        int64     `json:"dirs"`
	Bytes       int64     `json:"bytes"`
	StoredBytes int64     `json:"stored_bytes"`
	// StoredKnown says StoredBytes was computed: Info does, Fork does not
	// (it would walk the whole tree).
	StoredKnown bool    `json:"-"`
	Checkpoints int64   `json:"checkpoints"`
	Parent      *string `json:"parent"`
	Quota       Quota   `json:"quota"`
	Worker      string  `json:"worker"`
	// ExpiresAt is when the vault's owner deletes it (a fork made with
	// a TTL); nil: never.
	ExpiresAt *time.Time `json:"expires_at"`
}

// Vault is a handle on one named vault in a Store. It is cheap: it holds
// no state of its own, so a vault deleted or restored by another process is
// seen by the next call.
type Vault struct {
	s         *Store
	namespace string
	name      string
}

// Vault returns a handle on ns/name. Whether the vault exists is checked by
// each call, which fails with ErrVaultNotFound if it does not.
func (s *Store) Vault(ns, name string) *Vault { return &Vault{s: s, namespace: ns, name: name} }

// MaxFileSize is the largest size a file may reach in the store's vaults
// (Options.MaxFileSize), whatever the vault's quota.
func (v *Vault) MaxFileSize() int64 { return v.s.maxFileSize }

// Name is the vault's name.
func (v *Vault) Name() string { return v.name }

// Namespace is the vault's namespace.
func (v *Vault) Namespace() string { return v.namespace }

// nameToken reports whether s is 1-128 bytes, a letter or digit first,
// then letters, digits and bytes of extra. It is what the regular
// expression ^[A-Za-z0-9][A-Za-z0-9<extra>]{0,127}$ matches, written out:
// compiling that expression (127 optional repetitions) at package init
// cost every avfs command, `avfs version` included, a few hundred µs.
func nameToken(s, extra string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if i == 0 || strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// ValidVaultName reports whether name can name a vault or namespace: 1–128
// letters, digits, '_' and '-', starting with a letter or digit. No '.':
// the name is one token of a NATS subject.
func ValidVaultName(name string) error {
	if !nameToken(name, "_-") {
		return fmt.Errorf("name %q: want 1-128 of [A-Za-z0-9_-], starting with a letter or digit: %w", name, ErrInvalidArgument)
	}
	return nil
}

// ValidCheckpointName reports whether name can name a checkpoint: like a
// vault name, and '.' is allowed too ("v1.2-green").
func ValidCheckpointName(name string) error {
	if !nameToken(name, "._-") {
		return fmt.Errorf("checkpoint name %q: want 1-128 of [A-Za-z0-9._-], starting with a letter or digit: %w", name, ErrInvalidArgument)
	}
	return nil
}

// Create makes an empty vault.
func (s *Store) Create(ctx context.Context, ns, name string, q Quota, meta Meta) (Info, error) {
	if err := ValidVaultName(ns); err != nil {
		return Info{}, err
	}
	if err := ValidVaultName(name); err != nil {
		return Info{}, err
	}
	if err := q.Validate(); err != nil {
		return Info{}, err
	}
	info, _, err := write(ctx, s, ns, name, meta, "vault.create", false, func(t *Tx) (Info, error) {
		if err := t.insertVault(ns, name, q, sql.NullString{}, 0, 1, 0, 0, 0); err != nil {
			return Info{}, err
		}
		root, err := t.insertNode(&node{ino: 1, kind: KindDir, mode: 0o755, mtime: t.now, ctime: t.now, uid: NoOwner, gid: NoOwner, nlink: 2})
		if err != nil {
			return Info{}, err
		}
		t.v.root = root
		t.audit("vault.create", "/", quotaDetails(q))
		return t.info(false)
	})
	return info, err
}

func (t *Tx) insertVault(ns, name string, q Quota, parent sql.NullString, root, nextIno, files, dirs, bytes int64) error {
	var n int
	if err := t.row(`SELECT count(*) FROM vaults WHERE namespace=? AND name=?`, ns, name).Scan(&n); err != nil {
		return mapSQLErr(err)
	}
	if n > 0 {
		return fmt.Errorf("vault %q: %w", name, ErrVaultExists)
	}
	if nextIno < 2 {
		nextIno = 2
	}
	_, err := t.exec(`INSERT INTO vaults(namespace, name, created_at, root, epoch, next_ino, parent, files, dirs, bytes, max_size_mb, max_files, max_file_size_mb) VALUES(?,?,?,?,1,?,?,?,?,?,?,?,?)`,
		ns, name, t.now, root, nextIno, parent, files, dirs, bytes, ptrToNull(q.MaxSizeMB), ptrToNull(q.MaxFiles), ptrToNull(q.MaxFileSizeMB))
	if err != nil {
		return fmt.Errorf("create vault %q: %w", name, err)
	}
	return t.loadVault(ns, name)
}

// The largest quota values accepted: 2^40 MB is 1 EiB, and 2^60 entries
// far more than a store can hold. Below them the quota arithmetic (MB to
// bytes, usage plus growth) cannot overflow an int64.
const (
	MaxQuotaMB    int64 = 1 << 40
	MaxQuotaFiles int64 = 1 << 60
)

// Validate checks q's limits: each is nil (unlimited) or between 0 and
// MaxQuotaMB (sizes) or MaxQuotaFiles (entries). Every way of setting a
// quota (vault create, quota set, the wire, the CLI) comes through here.
func (q Quota) Validate() error {
	for _, l := range []struct {
		key string
		v   *int64
		max int64
	}{{"max_size_mb", q.MaxSizeMB, MaxQuotaMB}, {"max_files", q.MaxFiles, MaxQuotaFiles}, {"max_file_size_mb", q.MaxFileSizeMB, MaxQuotaMB}} {
		if l.v != nil && (*l.v < 0 || *l.v > l.max) {
			return fmt.Errorf("quota %s %d: want 0 to %d, or none for no limit: %w", l.key, *l.v, l.max, ErrInvalidArgument)
		}
	}
	return nil
}

func quotaDetails(q Quota) map[string]any {
	return map[string]any{"max_size_mb": q.MaxSizeMB, "max_files": q.MaxFiles, "max_file_size_mb": q.MaxFileSizeMB}
}

// info builds the Info of the transaction's vault.
func (t *Tx) info(stored bool) (Info, error) {
	in := Info{
		Name: t.v.name, Namespace: t.v.namespace, CreatedAt: time.Unix(0, t.v.createdAt).UTC(),
		Files: t.v.files, Dirs: t.v.dirs, Bytes: t.v.bytes, Quota: t.v.quota, Worker: t.v.worker,
	}
	if t.v.parent.Valid {
		p := t.v.parent.String
		in.Parent = &p
	}
	if err := t.row(`SELECT count(*) FROM checkpoints WHERE vault=? AND substr(name, 1, 1) != '.'`, t.v.id).Scan(&in.Checkpoints); err != nil {
		return in, mapSQLErr(err)
	}
	st, err := t.settings()
	if err != nil {
		return in, err
	}
	in.ExpiresAt = st.ExpiresAt
	if !stored {
		return in, nil
	}
	sb, err := t.storedBytes()
	in.StoredBytes, in.StoredKnown = sb, err == nil
	return in, err
}

// Info describes the vault.
func (v *Vault) Info(ctx context.Context) (Info, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (Info, error) { return t.info(true) })
}

// Incarnation identifies this vault among every vault that had or will
// have its namespace and name: a vault deleted and created again under
// the same name has another incarnation. A process holding state about a
// vault by name (a mount) compares it to know its state is of this vault.
func (v *Vault) Incarnation(ctx context.Context) (string, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) (string, error) {
		return fmt.Sprintf("%d.%d", t.v.id, t.v.createdAt), nil
	})
}

// List describes every vault in namespace ns, sorted by name.
func (s *Store) List(ctx context.Context, ns string) ([]Info, error) {
	return read(ctx, s, ns, "", func(t *Tx) ([]Info, error) {
		rows, err := t.query(`SELECT `+vaultCols+` FROM vaults WHERE namespace=? ORDER BY name`, ns)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		var vs []vaultRow
		for rows.Next() {
			r, err := scanVault(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			vs = append(vs, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out := make([]Info, 0, len(vs))
		for _, r := range vs {
			t.v, t.set = r, nil
			in, err := t.info(true)
			if err != nil {
				return nil, err
			}
			out = append(out, in)
		}
		return out, nil
	})
}

// Namespaces lists the namespaces that hold at least one vault.
func (s *Store) Namespaces(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT namespace FROM vaults ORDER BY namespace`)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, rows.Err()
}

// ForkResult is what Fork returns. Its Info leaves StoredBytes unknown.
type ForkResult struct {
	Info     Info          `json:"vault"`
	Source   string        `json:"source"`
	Duration time.Duration `json:"duration_ns"`
}

// Fork creates vault dst as a copy of src's current tree, or of one of its
// checkpoints. It copies no content and no tree: both vaults share every
// node until one of them writes, so it takes the same time at any size.
func (s *Store) Fork(ctx context.Context, ns, src, dst, checkpoint string, meta Meta) (ForkResult, error) {
	return s.fork(ctx, ns, src, dst, ForkOptions{Checkpoint: checkpoint}, meta)
}

func (s *Store) fork(ctx context.Context, ns, src, dst string, o ForkOptions, meta Meta) (ForkResult, error) {
	start := time.Now()
	checkpoint := o.Checkpoint
	if err := ValidVaultName(dst); err != nil {
		return ForkResult{}, err
	}
	res, _, err := write(ctx, s, ns, src, meta, "vault.fork", true, func(t *Tx) (ForkResult, error) {
		root, files, dirs, bytes := t.v.root, t.v.files, t.v.dirs, t.v.bytes
		srcID, forkedAt := t.v.id, int64(math.MaxInt64)
		if checkpoint != "" {
			cp, err := t.checkpoint(checkpoint)
			if err != nil {
				return ForkResult{}, err
			}
			root, files, dirs, bytes = cp.root, cp.Files, cp.Dirs, cp.Bytes
			forkedAt = cp.CreatedAt.UnixNano()
		} else {
			// Freeze the source's nodes: from now on both vaults share them.
			t.v.epoch++
		}
		t.audit("vault.fork", "/", map[string]any{"to": dst, "checkpoint": checkpoint})
		if err := t.saveVault(); err != nil {
			return ForkResult{}, err
		}
		if err := t.flushEvents(); err != nil {
			return ForkResult{}, err
		}
		t.events = nil
		srcName, q, nextIno := t.v.name, t.v.quota, t.v.nextIno
		// The fork inherits its source's settings, as it does its quota;
		// not its expiry.
		own, err := t.settings()
		if err != nil {
			return ForkResult{}, err
		}
		own.ExpiresAt = nil
		if err := t.insertVault(ns, dst, q, sql.NullString{String: srcName, Valid: true}, root, nextIno, files, dirs, bytes); err != nil {
			return ForkResult{}, err
		}
		cut, err := t.lastVersionID(forkedAt)
		if err != nil {
			return ForkResult{}, err
		}
		if err := t.linkHistory(t.v.id, srcID, cut); err != nil {
			return ForkResult{}, err
		}
		// The tree the fork starts from, kept for a three-way merge back
		// (merge.go): a hidden checkpoint, so GC keeps it and a handoff
		// carries it.
		if _, err := t.exec(`INSERT INTO checkpoints(vault, name, root, created_at, message, files, dirs, bytes, next_ino) VALUES(?,?,?,?,?,?,?,?,?)`,
			t.v.id, forkPoint, root, t.now, "forked from "+srcName, files, dirs, bytes, nextIno); err != nil {
			return ForkResult{}, fmt.Errorf("fork point: %w", err)
		}
		forked := map[string]any{"from": srcName, "checkpoint": checkpoint}
		if o.TTL > 0 {
			at := time.Unix(0, t.now).Add(o.TTL).UTC()
			own.ExpiresAt = &at
			forked["expires_at"] = at.Format(time.RFC3339Nano)
		}
		if own != (Settings{}) {
			if err := t.putSettings(own); err != nil {
				return ForkResult{}, err
			}
		} else {
			t.set = &own
		}
		t.audit("vault.forked", "/", forked)
		// Stored bytes need a walk of the tree, which would make the fork
		// as slow as the tree is large; Vault.Info computes them.
		in, err := t.info(false)
		return ForkResult{Info: in, Source: srcName}, err
	})
	res.Duration = time.Since(start)
	return res, err
}

// deleteVaultSQL removes vault ?2 of namespace ?1 with its checkpoints and
// request log; nodes and chunks stay for GC.
var deleteVaultSQL = []string{
	`DELETE FROM vault_settings WHERE vault=(SELECT id FROM vaults WHERE namespace=?1 AND name=?2)`,
	`DELETE FROM checkpoints WHERE vault=(SELECT id FROM vaults WHERE namespace=?1 AND name=?2)`,
	`DELETE FROM vaults WHERE namespace=?1 AND name=?2`,
	`DELETE FROM requests WHERE namespace=?1 AND vault=?2`,
}

// Delete removes the vault, its checkpoints and its request log, then frees
// the content that no other vault, checkpoint or fork references. Forks of
// it keep working: they hold their own references to shared nodes.
func (s *Store) Delete(ctx context.Context, ns, name string, meta Meta) error {
	return s.deleteIf(ctx, ns, name, meta, nil)
}

// DeleteAsked is Delete, or DeleteExpired when expired is set, for a
// request to delete the vault: in the same transaction it denies the
// commands held for approval in the vault, so that none runs, once
// granted, in another vault later created under its name. A worker that
// replaces its copy of a vault calls Delete, which leaves them.
func (s *Store) DeleteAsked(ctx context.Context, ns, name string, expired bool, meta Meta) error {
	return s.deleteIf(ctx, ns, name, meta, func(t *Tx) error {
		if expired {
			if err := expiredCheck(name)(t); err != nil {
				return err
			}
		}
		_, err := t.exec(`UPDATE approvals SET status='denied', reason='the vault was deleted' WHERE namespace=? AND vault=? AND status='pending'`, ns, name)
		return err
	})
}

// deleteIf deletes the vault if check (nil: always) passes in the
// delete's own transaction.
func (s *Store) deleteIf(ctx context.Context, ns, name string, meta Meta, check func(t *Tx) error) error {
	_, _, err := write(ctx, s, ns, name, meta, "vault.delete", true, func(t *Tx) (struct{}, error) {
		if check != nil {
			if err := check(t); err != nil {
				return struct{}{}, err
			}
		}
		if err := t.dropHistory(t.v.id); err != nil {
			return struct{}{}, err
		}
		for _, q := range deleteVaultSQL {
			if _, err := t.exec(q, ns, name); err != nil {
				return struct{}{}, fmt.Errorf("delete vault %q: %w", name, err)
			}
		}
		t.audit("vault.delete", "/", nil)
		if err := t.flushEvents(); err != nil {
			return struct{}{}, err
		}
		t.events, t.v.id = nil, 0 // the row is gone: nothing to save
		return struct{}{}, nil
	})
	if err != nil {
		return err
	}
	if _, err := s.GC(ctx); err != nil {
		return fmt.Errorf("delete vault %q: gc: %w", name, err)
	}
	return nil
}

// SetQuota changes the vault's limits. Lowering a limit below current usage
// is allowed; it only stops further growth.
func (v *Vault) SetQuota(ctx context.Context, q Quota, meta Meta) (Quota, error) {
	if err := q.Validate(); err != nil {
		return Quota{}, err
	}
	q2, _, err := write(ctx, v.s, v.namespace, v.name, meta, "quota.set", true, func(t *Tx) (Quota, error) {
		t.v.quota = q
		t.audit("quota.set", "/", quotaDetails(q))
		return q, nil
	})
	return q2, err
}

// Usage is the vault's current consumption, as quotas count it.
type Usage struct {
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"`
	// Mode is the vault's quota mode; in QuotaUnique, UniqueBytes is
	// what max_size_mb counts (nil in QuotaLogical).
	Mode        string `json:"mode"`
	UniqueBytes *int64 `json:"unique_bytes,omitempty"`
}

// Quota returns the vault's limits and usage.
func (v *Vault) Quota(ctx context.Context) (Quota, Usage, error) {
	type qu struct {
		q Quota
		u Usage
	}
	r, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (qu, error) {
		u := Usage{Bytes: t.v.bytes, Files: t.v.files + t.v.dirs}
		mode, err := t.quotaMode()
		if err != nil {
			return qu{}, err
		}
		u.Mode = mode
		if mode == QuotaUnique {
			sb, err := t.storedBytes()
			if err != nil {
				return qu{}, err
			}
			u.UniqueBytes = &sb
		}
		return qu{t.v.quota, u}, nil
	})
	return r.q, r.u, err
}

// SetWorker records which worker owns the vault (the fleet's placement).
func (v *Vault) SetWorker(ctx context.Context, worker string) error {
	_, _, err := write(ctx, v.s, v.namespace, v.name, Meta{}, "vault.owner", true, func(t *Tx) (struct{}, error) {
		t.v.worker = worker
		return struct{}{}, nil
	})
	return err
}

// Exists reports whether the vault exists.
func (v *Vault) Exists(ctx context.Context) (bool, error) {
	_, err := read(ctx, v.s, v.namespace, v.name, func(t *Tx) (struct{}, error) { return struct{}{}, nil })
	if errors.Is(err, ErrVaultNotFound) {
		return false, nil
	}
	return err == nil, err
}

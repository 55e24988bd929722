package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// exportFormat marks a file written by Export.
const exportFormat = "avfs-vault-export-1"

// TransferResult is what Export and Import return.
type TransferResult struct {
	Info  Info   `json:"vault"`
	File  string `json:"file"`
	Bytes int64  `json:"bytes"`
}

// Export writes vault ns/name, with its checkpoints, audit log and request
// log, to file: one self-contained SQLite database (journal mode DELETE,
// no side files) holding exactly the nodes and chunks the vault
// references, whatever it shares with other vaults here. An existing file
// is replaced atomically.
func (s *Store) Export(ctx context.Context, ns, name, file string) (TransferResult, error) {
	return s.export(ctx, ns, name, file, true)
}

// ExportManifest writes what Export writes except the chunks' data: the
// vault's trees name their content by hash only. A receiver fetches the
// chunks it lacks (ManifestChunks, MissingChunks, AddChunks) before it
// imports the manifest, so moving a vault between stores moves only the
// content the receiver does not have.
func (s *Store) ExportManifest(ctx context.Context, ns, name, file string) (TransferResult, error) {
	return s.export(ctx, ns, name, file, false)
}

func (s *Store) export(ctx context.Context, ns, name, file string, withChunks bool) (TransferResult, error) {
	// A manifest's caller needs no Info, whose stored bytes walk the tree.
	info := Info{Name: name, Namespace: ns}
	if withChunks {
		var err error
		if info, err = s.Vault(ns, name).Info(ctx); err != nil {
			return TransferResult{}, err
		}
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return TransferResult{}, fmt.Errorf("export %q: %w", name, err)
	}
	tmp := abs + ".partial"
	os.Remove(tmp)
	defer os.Remove(tmp)
	if err := createExportFile(ctx, tmp); err != nil {
		return TransferResult{}, fmt.Errorf("export %q: %w", name, err)
	}
	err = withAttached(ctx, s, tmp, "ex", false, func(c *sql.Conn) error {
		var id, root int64
		if err := c.QueryRowContext(ctx, `SELECT id, root FROM vaults WHERE namespace=? AND name=?`, ns, name).Scan(&id, &root); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("vault %q: %w", name, ErrVaultNotFound)
			}
			return err
		}
		stmts := []string{
			`INSERT INTO ex.meta(key, value) VALUES('format', '` + exportFormat + `')`,
			`INSERT INTO ex.vaults SELECT * FROM vaults WHERE id=?1`,
			`INSERT INTO ex.checkpoints SELECT * FROM checkpoints WHERE vault=?1 AND (substr(name, 1, 1) != '.' OR name = '` + forkPoint + `')`,
			fmt.Sprintf(reachableSQL, `SELECT root FROM vaults WHERE id=?1 UNION SELECT root FROM checkpoints WHERE vault=?1 AND (substr(name, 1, 1) != '.' OR name = '`+forkPoint+`')`) +
				` INSERT INTO ex.nodes SELECT n.* FROM nodes n JOIN live ON n.id = live.id`,
			`INSERT INTO ex.dirents SELECT d.* FROM dirents d WHERE d.dir IN (SELECT id FROM ex.nodes)`,
			`INSERT INTO ex.node_meta SELECT m.* FROM node_meta m WHERE m.node IN (SELECT id FROM ex.nodes)`,
			`INSERT INTO ex.audit SELECT * FROM audit WHERE vault_id=?1`,
			`INSERT INTO ex.requests(` + requestCols + `) SELECT ` + requestCols + ` FROM requests WHERE (namespace, vault) = (SELECT namespace, name FROM vaults WHERE id=?1)`,
			// File history travels flattened: the versions the vault sees,
			// its own and its sources' up to the fork points, become the
			// exported vault's own (importers have no sources to link to).
			historySources + ` INSERT INTO ex.versions(id, vault, path, version, size, chunks, created_at) SELECT v.id, ?1, v.path, v.version, v.size, v.chunks, v.created_at FROM versions v JOIN src ON v.vault = src.vault AND v.id <= src.cut`,
			`INSERT INTO ex.history_settings SELECT * FROM history_settings WHERE vault=?1`,
			`INSERT INTO ex.vault_settings SELECT * FROM vault_settings WHERE vault=?1`,
		}
		if !withChunks {
			stmts = append(stmts, `INSERT INTO ex.meta(key, value) VALUES('chunks', 'by-hash')`)
		}
		for _, q := range stmts {
			if _, err := c.ExecContext(ctx, q, id); err != nil {
				return fmt.Errorf("copy: %w", mapSQLErr(err))
			}
		}
		if !withChunks {
			return nil
		}
		// Chunks: the distinct hashes the exported nodes list.
		return copyChunks(ctx, c, "(SELECT chunks FROM ex.nodes UNION ALL SELECT chunks FROM ex.versions)", "main.chunks", "ex.chunks")
	})
	if err != nil {
		return TransferResult{}, fmt.Errorf("export %q: %w", name, err)
	}
	if err := syncFile(tmp); err != nil {
		return TransferResult{}, fmt.Errorf("export %q: %w", name, err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		return TransferResult{}, fmt.Errorf("export %q: %w", name, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return TransferResult{}, err
	}
	return TransferResult{Info: info, File: file, Bytes: st.Size()}, nil
}

// copyChunks copies into dst the chunks of src whose hashes the nodes of
// table nodes list, skipping ones dst already has.
func copyChunks(ctx context.Context, c *sql.Conn, nodes, src, dst string) error {
	if _, err := c.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS xfer(hash BLOB PRIMARY KEY) WITHOUT ROWID`); err != nil {
		return err
	}
	defer c.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS temp.xfer`)
	rows, err := c.QueryContext(ctx, `SELECT chunks FROM `+nodes+` WHERE chunks IS NOT NULL`)
	if err != nil {
		return err
	}
	seen := map[[hashLen]byte]struct{}{}
	for rows.Next() {
		var list []byte
		if err := rows.Scan(&list); err != nil {
			rows.Close()
			return err
		}
		for h := range contentHashes(list) {
			seen[h] = struct{}{}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for h := range seen {
		if _, err := c.ExecContext(ctx, `INSERT INTO temp.xfer(hash) VALUES(?)`, h[:]); err != nil {
			return err
		}
	}
	if _, err := c.ExecContext(ctx, `INSERT INTO `+dst+`(hash, data) SELECT s.hash, s.data FROM `+src+` s JOIN temp.xfer x ON x.hash = s.hash WHERE true ON CONFLICT(hash) DO NOTHING`); err != nil {
		return fmt.Errorf("copy chunks: %w", mapSQLErr(err))
	}
	var missing int
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM temp.xfer x WHERE NOT EXISTS (SELECT 1 FROM `+dst+` d WHERE d.hash = x.hash)`).Scan(&missing); err != nil {
		return err
	}
	if missing > 0 {
		return fmt.Errorf("%d chunks missing: %w", missing, ErrInvalidArgument)
	}
	return nil
}

// importedNodeCols lists, each after a comma, the node columns added
// since the first version (nodeColsAdded) that the attached file im has:
// a file written by an older version has fewer, which keep their defaults.
func importedNodeCols(ctx context.Context, c *sql.Conn) (string, error) {
	var b strings.Builder
	for _, col := range nodeColsAdded {
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('nodes', 'im') WHERE name=?`, col[0]).Scan(&n); err != nil {
			return "", mapSQLErr(err)
		}
		if n > 0 {
			b.WriteString(", " + col[0])
		}
	}
	return b.String(), nil
}

// createExportFile makes an empty export file. It is written without a
// journal or fsyncs (a crash leaves a partial file, which export never
// renames into place), then synced once when complete (syncFile).
func createExportFile(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(OFF)&_pragma=synchronous(OFF)")
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, schema+";"+metaSchema+";"+historySchema+";"+settingsSchema)
	return err
}

// syncFile flushes a finished export file to disk before it is renamed
// into place.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// withAttached runs fn in a transaction on one connection with file
// attached as alias. SQLite cannot attach inside a transaction, hence the
// dedicated connection. An import (writeMain) writes the store and queues
// with its writers; an export only reads the store, from the snapshot its
// transaction sees, so writers go on meanwhile, and it writes the file
// without a journal or fsyncs (see createExportFile).
func withAttached(ctx context.Context, s *Store, file, alias string, writeMain bool, fn func(c *sql.Conn) error) error {
	begin := "BEGIN"
	if writeMain {
		s.lockWriter()
		defer s.wmu.Unlock()
		begin = "BEGIN IMMEDIATE"
	}
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	uri := "file:" + strings.ReplaceAll(file, "?", "%3f")
	if _, err := c.ExecContext(ctx, `ATTACH DATABASE ? AS `+alias, uri); err != nil {
		return fmt.Errorf("attach %s: %w", file, mapSQLErr(err))
	}
	defer c.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE `+alias)
	if !writeMain {
		for _, q := range []string{`PRAGMA ` + alias + `.journal_mode=OFF`, `PRAGMA ` + alias + `.synchronous=OFF`} {
			if _, err := c.ExecContext(ctx, q); err != nil {
				return mapSQLErr(err)
			}
		}
	}
	if _, err := c.ExecContext(ctx, begin); err != nil {
		return mapSQLErr(err)
	}
	if err := fn(c); err != nil {
		c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return err
	}
	if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
		c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		return mapSQLErr(err)
	}
	return nil
}

// Import restores a file written by Export as vault ns/name. The imported
// nodes get new ids and start frozen, so they can never collide with or
// change anything already in this store. The audit history it copies is
// marked imported: AuditSince, which feeds the audit stream, skips it.
// A manifest (ExportManifest) imports once this store has its chunks.
func (s *Store) Import(ctx context.Context, file, ns, name string, meta Meta) (TransferResult, error) {
	return s.importFile(ctx, file, ns, name, meta, false)
}

// Receive imports file as Import does, in one transaction with deleting
// the vault ns/name this store holds, if any: a worker taking a vault
// over swaps its outdated copy for the current one, and a crash leaves
// one or the other. It records the action vault.received, not
// vault.import: the vault moved between machines, nobody imported it.
// The old copy's content stays until the next GC.
func (s *Store) Receive(ctx context.Context, file, ns, name string, meta Meta) (TransferResult, error) {
	return s.importFile(ctx, file, ns, name, meta, true)
}

func (s *Store) importFile(ctx context.Context, file, ns, name string, meta Meta, replace bool) (TransferResult, error) {
	action := "vault.import"
	if replace {
		action = "vault.received"
	}
	if err := ValidVaultName(ns); err != nil {
		return TransferResult{}, err
	}
	if err := ValidVaultName(name); err != nil {
		return TransferResult{}, err
	}
	st, err := os.Stat(file)
	if err != nil {
		return TransferResult{}, fmt.Errorf("import %s: %w", file, ErrNotFound)
	}
	err = withAttached(ctx, s, file, "im", true, func(c *sql.Conn) error {
		var format string
		if err := c.QueryRowContext(ctx, `SELECT value FROM im.meta WHERE key='format'`).Scan(&format); err != nil || format != exportFormat {
			return fmt.Errorf("%s is not an avfs vault export: %w", file, ErrInvalidArgument)
		}
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM vaults WHERE namespace=? AND name=?`, ns, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 && !replace {
			return fmt.Errorf("vault %q: %w", name, ErrVaultExists)
		}
		if n > 0 {
			// The outdated copy's history goes with it (what forks of it
			// share stays, as Delete leaves it).
			for _, q := range dropHistorySQL {
				if _, err := c.ExecContext(ctx, q, ns, name); err != nil {
					return fmt.Errorf("replace: %w", mapSQLErr(err))
				}
			}
			for _, q := range deleteVaultSQL {
				if _, err := c.ExecContext(ctx, q, ns, name); err != nil {
					return fmt.Errorf("replace: %w", mapSQLErr(err))
				}
			}
		}
		var oldID int64
		if err := c.QueryRowContext(ctx, `SELECT id FROM im.vaults`).Scan(&oldID); err != nil {
			return fmt.Errorf("%s holds no vault: %w", file, ErrInvalidArgument)
		}
		var ms, mf, mfs sql.NullInt64
		if err := c.QueryRowContext(ctx, `SELECT max_size_mb, max_files, max_file_size_mb FROM im.vaults`).Scan(&ms, &mf, &mfs); err != nil {
			return err
		}
		if err := (Quota{MaxSizeMB: nullToPtr(ms), MaxFiles: nullToPtr(mf), MaxFileSizeMB: nullToPtr(mfs)}).Validate(); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var off int64
		if err := c.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM nodes`).Scan(&off); err != nil {
			return err
		}
		now := s.now().UnixNano()
		res, err := c.ExecContext(ctx, `INSERT INTO vaults(namespace, name, created_at, root, epoch, next_ino, parent, files, dirs, bytes, max_size_mb, max_files, max_file_size_mb)
			SELECT ?, ?, ?, root + ?, 1, next_ino, NULL, files, dirs, bytes, max_size_mb, max_files, max_file_size_mb FROM im.vaults`, ns, name, now, off)
		if err != nil {
			return mapSQLErr(err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		added, err := importedNodeCols(ctx, c)
		if err != nil {
			return err
		}
		stmts := []string{
			`INSERT INTO nodes(id, vault, epoch, ino, kind, mode, size, mtime, ctime, target, chunks` + added + `) SELECT id + ?1, ?2, 0, ino, kind, mode, size, mtime, ctime, target, chunks` + added + ` FROM im.nodes`,
			`INSERT INTO dirents(dir, name, child) SELECT dir + ?1, name, child + ?1 FROM im.dirents`,
			`INSERT INTO checkpoints(vault, name, root, created_at, message, auto, files, dirs, bytes, next_ino, trace) SELECT ?2, name, root + ?1, created_at, message, auto, files, dirs, bytes, next_ino, trace FROM im.checkpoints`,
			`INSERT INTO audit(time, vault_id, namespace, vault, action, path, actor, request_id, trace_id, details, imported) SELECT time, ?2, ?3, ?4, action, path, actor, request_id, trace_id, details, 1 FROM im.audit ORDER BY id`,
			`INSERT INTO audit(time, vault_id, namespace, vault, action, path, actor, request_id, trace_id, details) VALUES(?5, ?2, ?3, ?4, ?10, '/', ?6, ?7, ?8, json_object('file', ?9))`,
		}
		// Files exported before tags existed have no node_meta.
		var hasMeta int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM im.sqlite_master WHERE name='node_meta'`).Scan(&hasMeta); err != nil {
			return err
		}
		if hasMeta > 0 {
			stmts = append(stmts, `INSERT INTO node_meta(node, key, value) SELECT node + ?1, key, value FROM im.node_meta`)
		}
		// Files exported before history and settings travelled lack them.
		hasHistory, err := attachedHas(ctx, c, "im", "versions", "history_settings", "vault_settings")
		if err != nil {
			return err
		}
		if hasHistory {
			// A vault moved between workers keeps its expiry; an import
			// by hand makes a new vault that never expires.
			expires := `NULL`
			if replace {
				expires = `expires_at`
			}
			// Files exported before the replication setting lack it.
			var hasRepl int
			if err := c.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('vault_settings', 'im') WHERE name='replication'`).Scan(&hasRepl); err != nil {
				return err
			}
			repl := `NULL`
			if hasRepl > 0 {
				repl = `replication`
			}
			stmts = append(stmts,
				`INSERT INTO versions(vault, path, version, size, chunks, created_at) SELECT ?2, path, version, size, chunks, created_at FROM im.versions ORDER BY id`,
				`INSERT INTO history_settings(vault, keep, max_age, coalesce) SELECT ?2, keep, max_age, coalesce FROM im.history_settings`,
				`INSERT INTO vault_settings(vault, auto_keep, auto_max_age, quota_mode, expires_at, replication) SELECT ?2, auto_keep, auto_max_age, quota_mode, `+expires+`, `+repl+` FROM im.vault_settings`)
		}
		for _, q := range stmts {
			if _, err := c.ExecContext(ctx, q, off, id, ns, name, now, meta.Actor, meta.RequestID, meta.TraceID, filepath.Base(file), action); err != nil {
				return fmt.Errorf("copy: %w", mapSQLErr(err))
			}
		}
		if !strings.Contains(added, "nlink") {
			// A file from before link counts: count its directories'.
			if _, err := c.ExecContext(ctx, `UPDATE nodes SET nlink = 2 + (SELECT count(*) FROM dirents d JOIN nodes c ON c.id = d.child WHERE d.dir = nodes.id AND c.kind = ?) WHERE id > ? AND kind = ?`, KindDir, off, KindDir); err != nil {
				return fmt.Errorf("copy: %w", mapSQLErr(err))
			}
		}
		// The request log travels with the vault, so that a request
		// redelivered to its new worker returns the stored result. The
		// ids are only kept when the vault keeps its name: under another
		// name they would answer for a vault they did not change.
		var oldNS, oldName string
		if err := c.QueryRowContext(ctx, `SELECT namespace, name FROM im.vaults`).Scan(&oldNS, &oldName); err != nil {
			return err
		}
		if oldNS == ns && oldName == name {
			// An export from before the log was scoped has no args_hash.
			cols := requestCols
			var hashed int
			if err := c.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('requests', 'im') WHERE name='args_hash'`).Scan(&hashed); err != nil {
				return err
			}
			if hashed == 0 {
				cols = strings.TrimSuffix(cols, ", args_hash")
			}
			if _, err := c.ExecContext(ctx, `INSERT INTO requests(`+cols+`) SELECT `+cols+` FROM im.requests WHERE namespace=?1 AND vault=?2 ON CONFLICT(namespace, vault, request_id) DO NOTHING`, ns, name); err != nil {
				return fmt.Errorf("copy: %w", mapSQLErr(err))
			}
		}
		withVersions := "im.nodes"
		if hasHistory {
			withVersions = "(SELECT chunks FROM im.nodes UNION ALL SELECT chunks FROM im.versions)"
		}
		return copyChunks(ctx, c, withVersions, "im.chunks", "main.chunks")
	})
	if err != nil {
		return TransferResult{}, fmt.Errorf("import %s: %w", file, err)
	}
	info, err := s.Vault(ns, name).Info(ctx)
	return TransferResult{Info: info, File: file, Bytes: st.Size()}, err
}

// attachedHas reports whether the attached database alias has every one
// of tables.
func attachedHas(ctx context.Context, c *sql.Conn, alias string, tables ...string) (bool, error) {
	for _, tb := range tables {
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM `+alias+`.sqlite_master WHERE type='table' AND name=?`, tb).Scan(&n); err != nil {
			return false, mapSQLErr(err)
		}
		if n == 0 {
			return false, nil
		}
	}
	return true, nil
}

package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// RequestKey names one entry of the request log. The log is scoped to a
// vault: the same id in another vault or namespace is another request.
// Op and ArgsHash (a digest of the request's canonical arguments, "" when
// unknown) say what the id was used for: the same id sent with another op
// or other arguments is refused with ErrConflict, never answered with the
// first request's result.
type RequestKey struct {
	Namespace string
	Vault     string
	ID        string
	Op        string
	ArgsHash  string
}

// check refuses a logged (op, args hash) that is not the request k names. An entry logged before arguments were hashed ("") matches any.
func (k RequestKey) check(op, hash string) error {
	if op != k.Op {
		return fmt.Errorf("request id %q was used for %s in vault %q, not %s: %w", k.ID, op, k.Vault, k.Op, ErrConflict)
	}
	if hash != "" && k.ArgsHash != "" && hash != k.ArgsHash {
		return fmt.Errorf("request id %q was used for %s in vault %q with other arguments: %w", k.ID, op, k.Vault, ErrConflict)
	}
	return nil
}

const sqlLookupRequest = `SELECT op, args_hash, result FROM requests WHERE namespace=? AND vault=? AND request_id=?`

// StoredResult returns the result recorded for request k, if any; an id
// recorded for another op or other arguments fails with ErrConflict. Long
// operations that span several transactions (exec) check it first and
// record their result with StoreResult at the end.
func (s *Store) StoredResult(ctx context.Context, k RequestKey) (result []byte, ok bool, err error) {
	if err := s.commitBatchOf(ctx); err != nil {
		return nil, false, err
	}
	var op, hash string
	// Prepared once per store: exec asks this before every command, and
	// preparing the statement each time cost most of the lookup (SQLite
	// parses and plans it anew).
	st, err := s.prepared(ctx, sqlLookupRequest)
	if err != nil {
		return nil, false, err
	}
	err = st.QueryRowContext(ctx, k.Namespace, k.Vault, k.ID).Scan(&op, &hash, &result)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, mapSQLErr(err)
	}
	if err := k.check(op, hash); err != nil {
		return nil, false, err
	}
	return result, true, nil
}

// StoreResult records result for request k; an id already recorded in
// k's vault keeps its first result and StoreResult fails with ErrConflict.
func (s *Store) StoreResult(ctx context.Context, k RequestKey, result []byte) error {
	s.lockWriter()
	defer s.wmu.Unlock()
	res, err := s.db.ExecContext(ctx, `INSERT INTO requests(request_id, namespace, vault, op, result, created_at, args_hash) VALUES(?,?,?,?,?,?,?)
		ON CONFLICT(namespace, vault, request_id) DO NOTHING`,
		k.ID, k.Namespace, k.Vault, k.Op, result, s.now().UnixNano(), k.ArgsHash)
	if err != nil {
		return fmt.Errorf("store result of %s: %w", k.ID, mapSQLErr(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("request %s already has a result: %w", k.ID, ErrConflict)
	}
	return nil
}

// ReplaceResult records result for request k, replacing an earlier one
// for the same op and arguments: a request held for approval is answered
// first with approval_required and, once granted, with the run's
// envelope.
func (s *Store) ReplaceResult(ctx context.Context, k RequestKey, result []byte) error {
	s.lockWriter()
	defer s.wmu.Unlock()
	_, err := s.db.ExecContext(ctx, `INSERT INTO requests(request_id, namespace, vault, op, result, created_at, args_hash) VALUES(?,?,?,?,?,?,?)
		ON CONFLICT(namespace, vault, request_id) DO UPDATE SET result=excluded.result WHERE op=excluded.op`,
		k.ID, k.Namespace, k.Vault, k.Op, result, s.now().UnixNano(), k.ArgsHash)
	if err != nil {
		return fmt.Errorf("store result of %s: %w", k.ID, mapSQLErr(err))
	}
	return nil
}

// requestsTable is the request log's table. Its key is (namespace, vault,
// request id); args_hash came last, so older stores get it appended.
const requestsTable = `requests(
	request_id TEXT NOT NULL,
	namespace TEXT NOT NULL,
	vault TEXT NOT NULL,
	op TEXT NOT NULL,
	result BLOB NOT NULL,
	created_at INTEGER NOT NULL,
	args_hash TEXT NOT NULL DEFAULT '',
	PRIMARY KEY(namespace, vault, request_id)
)`

// requestCols are the request log's columns, in table order.
const requestCols = `request_id, namespace, vault, op, result, created_at, args_hash`

// migrateRequests rebuilds a request log keyed by request id alone (a
// store from before the log was scoped to the vault) with its scoped key.
// The old entries keep their ids under their vault and match any
// arguments, as they did. It runs in one transaction: a crash leaves the
// old table or the new one.
func migrateRequests(ctx context.Context, db *sql.DB) error {
	var pk int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('requests') WHERE pk > 0`).Scan(&pk); err != nil {
		return err
	}
	if pk != 1 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range []string{
		`CREATE TABLE requests_scoped` + requestsTable[len("requests"):],
		`INSERT INTO requests_scoped(request_id, namespace, vault, op, result, created_at) SELECT request_id, namespace, vault, op, result, created_at FROM requests`,
		`DROP TABLE requests`,
		`ALTER TABLE requests_scoped RENAME TO requests`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("request log: %w", err)
		}
	}
	return tx.Commit()
}

package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// StoredResult returns the result recorded for request id, if any. Long
// operations that span several transactions (exec) check it first and
// record their result with StoreResult at the end.
func (s *Store) StoredResult(ctx context.Context, id string) (op string, result []byte, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT op, result FROM requests WHERE request_id=?`, id).Scan(&op, &result)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, mapSQLErr(err)
	}
	return op, result, true, nil
}

// StoreResult records result for request id; an id already recorded keeps
// its first result and StoreResult fails with ErrConflict.
func (s *Store) StoreResult(ctx context.Context, ns, vaultName, id, op string, result []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	res, err := s.db.ExecContext(ctx, `INSERT INTO requests(request_id, namespace, vault, op, result, created_at) VALUES(?,?,?,?,?,?) ON CONFLICT(request_id) DO NOTHING`,
		id, ns, vaultName, op, result, s.now().UnixNano())
	if err != nil {
		return fmt.Errorf("store result of %s: %w", id, mapSQLErr(err))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("request %s already has a result: %w", id, ErrConflict)
	}
	return nil
}

// ReplaceResult records result for request id, replacing an earlier one:
// a request held for approval is answered first with approval_required
// and, once granted, with the run's envelope.
func (s *Store) ReplaceResult(ctx context.Context, ns, vaultName, id, op string, result []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.db.ExecContext(ctx, `INSERT INTO requests(request_id, namespace, vault, op, result, created_at) VALUES(?,?,?,?,?,?)
		ON CONFLICT(request_id) DO UPDATE SET result=excluded.result`, id, ns, vaultName, op, result, s.now().UnixNano())
	if err != nil {
		return fmt.Errorf("store result of %s: %w", id, mapSQLErr(err))
	}
	return nil
}

package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrApprovalMissing is returned for an unknown approval id.
var ErrApprovalMissing = errors.New("approval not found")

// Approval is a request held for an operator's decision. Request and
// Result are opaque to the store (the exec layer's JSON).
type Approval struct {
	ID          string
	Namespace   string
	Vault       string
	Status      string // pending | granted | denied | expired | running
	Reason      string
	RequestedAt time.Time
	ExpiresAt   time.Time
	Request     []byte
	Result      []byte
}

const approvalSchema = `CREATE TABLE IF NOT EXISTS approvals(
	id TEXT PRIMARY KEY,
	namespace TEXT NOT NULL,
	vault TEXT NOT NULL,
	status TEXT NOT NULL,
	reason TEXT NOT NULL DEFAULT '',
	requested_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	request BLOB NOT NULL,
	result BLOB
)`

const approvalCols = `id, namespace, vault, status, reason, requested_at, expires_at, request, result`

func scanApproval(sc interface{ Scan(...any) error }) (Approval, error) {
	var a Approval
	var req, exp int64
	err := sc.Scan(&a.ID, &a.Namespace, &a.Vault, &a.Status, &a.Reason, &req, &exp, &a.Request, &a.Result)
	a.RequestedAt, a.ExpiresAt = time.Unix(0, req).UTC(), time.Unix(0, exp).UTC()
	return a, err
}

// PutApproval inserts or replaces an approval.
func (s *Store) PutApproval(ctx context.Context, a Approval) error {
	s.lockWriter()
	defer s.wmu.Unlock()
	_, err := s.db.ExecContext(ctx, `INSERT INTO approvals(`+approvalCols+`) VALUES(?,?,?,?,?,?,?,?,?)
		ON CONFLICT(id) DO UPDATE SET status=excluded.status, reason=excluded.reason, result=excluded.result`,
		a.ID, a.Namespace, a.Vault, a.Status, a.Reason, a.RequestedAt.UnixNano(), a.ExpiresAt.UnixNano(), a.Request, a.Result)
	if err != nil {
		return fmt.Errorf("put approval %s: %w", a.ID, mapSQLErr(err))
	}
	return nil
}

// TransitionApproval moves approval id from status from to status to,
// atomically, so that two operators granting at once run it only once.
// It fails with ErrConflict when the approval is not in status from.
func (s *Store) TransitionApproval(ctx context.Context, id, from, to, reason string) (Approval, error) {
	s.lockWriter()
	defer s.wmu.Unlock()
	res, err := s.db.ExecContext(ctx, `UPDATE approvals SET status=?, reason=CASE WHEN ?='' THEN reason ELSE ? END WHERE id=? AND status=?`, to, reason, reason, id, from)
	if err != nil {
		return Approval{}, mapSQLErr(err)
	}
	a, err := s.approval(ctx, id)
	if err != nil {
		return a, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return a, fmt.Errorf("approval %s is %s, not %s: %w", id, a.Status, from, ErrConflict)
	}
	return a, nil
}

func (s *Store) approval(ctx context.Context, id string) (Approval, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE id=?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return a, fmt.Errorf("approval %q: %w", id, ErrApprovalMissing)
	}
	return a, mapSQLErr(err)
}

// Approval returns one approval.
func (s *Store) Approval(ctx context.Context, id string) (Approval, error) {
	return s.approval(ctx, id)
}

// Approvals lists a namespace's approvals, newest first.
func (s *Store) Approvals(ctx context.Context, ns string) ([]Approval, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE namespace=? ORDER BY requested_at DESC`, ns)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

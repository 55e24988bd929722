package vault

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// AuditSince returns up to limit audit events of every vault of the
// store with an id above afterID, in id order (0 = 1000), leaving out the
// history an import copied from another store. Writers commit
// one at a time and ids grow with each insert, so an event can never
// appear later below an id already returned: following by id misses
// nothing.
func (s *Store) AuditSince(ctx context.Context, afterID int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	st, err := s.prepared(ctx, `SELECT id, time, namespace, vault, action, path, actor, request_id, trace_id, details FROM audit WHERE id>? AND imported=0 ORDER BY id LIMIT ?`)
	if err != nil {
		return nil, fmt.Errorf("audit since %d: %w", afterID, err)
	}
	rows, err := st.QueryContext(ctx, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("audit since %d: %w", afterID, mapSQLErr(err))
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var at int64
		var d string
		if err := rows.Scan(&e.ID, &at, &e.Namespace, &e.Vault, &e.Action, &e.Path, &e.Actor, &e.RequestID, &e.TraceID, &d); err != nil {
			return nil, mapSQLErr(err)
		}
		e.Time = time.Unix(0, at).UTC()
		if err := json.Unmarshal([]byte(d), &e.Details); err != nil {
			return nil, fmt.Errorf("audit %d details: %w", e.ID, err)
		}
		out = append(out, e)
	}
	return out, mapSQLErr(rows.Err())
}

// AuditNotify returns a channel closed after the next commit, in this
// process, that adds audit events. Writes by other processes do not close
// it: a follower still polls, and waits on this only to react sooner.
func (s *Store) AuditNotify() <-chan struct{} {
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	if s.auditCh == nil {
		s.auditCh = make(chan struct{})
	}
	return s.auditCh
}

// notifyAudit wakes the AuditNotify waiters.
func (s *Store) notifyAudit() {
	s.auditMu.Lock()
	if s.auditCh != nil {
		close(s.auditCh)
		s.auditCh = nil
	}
	s.auditMu.Unlock()
}

// Meta returns the value stored under key in the store's meta table.
func (s *Store) Meta(ctx context.Context, key string) (value string, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key=?`, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("meta %s: %w", key, mapSQLErr(err))
	}
	return value, true, nil
}

// SetMeta stores value under key in the store's meta table (small
// bookkeeping, such as how far the audit stream is published).
//
// It commits on the writer connection, so that it does not make the
// writers' cached vault rows stale (see Store.vrows).
func (s *Store) SetMeta(ctx context.Context, key, value string) error {
	return s.SetMetas(ctx, map[string]string{key: value})
}

// SetMetas is SetMeta for several keys, in one transaction.
func (s *Store) SetMetas(ctx context.Context, kv map[string]string) error {
	if len(kv) == 0 {
		return nil
	}
	s.lockWriter()
	defer s.wmu.Unlock()
	conn, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("set meta: begin: %w", err)
	}
	st, err := s.writerStmt(ctx, `INSERT INTO meta(key, value) VALUES(?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value`)
	for key, value := range kv {
		if err != nil {
			break
		}
		_, err = st.ExecContext(ctx, key, value)
		if err = mapSQLErr(err); err != nil {
			err = fmt.Errorf("%s: %w", key, err)
		}
	}
	if err == nil {
		err = s.commit(ctx)
	}
	if err != nil {
		s.rollback(conn)
		return fmt.Errorf("set meta: %w", err)
	}
	return nil
}

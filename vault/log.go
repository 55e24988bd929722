package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The change log. Every committed write transaction on a vault, whichever
// process makes it, takes the next number of the vault's change sequence
// (vaults.seq) and stamps its audit events with it, in the transaction
// itself. A reader that caches a vault (a mount in another process) polls
// LogPos, which costs one indexed row, and when the sequence moved reads
// the events since its cursor (Log) to learn which paths changed; the
// events of its own transactions it recognises by their sequence numbers
// (Tx.Seq).

// LogPos is where a vault's change log stands.
type LogPos struct {
	// Vault is the vault's id in the store. A vault deleted and created
	// again under its name (an import, a handoff) has a new one, and its
	// log starts again.
	Vault int64
	// Seq is the vault's change sequence number: one more for every
	// committed write transaction on it.
	Seq int64
	// Last is the id of the vault's latest audit event, the cursor to
	// pass to Log.
	Last int64
}

// LogPos returns where the vault's change log stands.
func (v *Vault) LogPos(ctx context.Context) (LogPos, error) {
	st, err := v.s.prepared(ctx, `SELECT v.id, v.seq, (SELECT coalesce(max(a.id), 0) FROM audit a WHERE a.vault_id = v.id) FROM vaults v WHERE v.namespace=? AND v.name=?`)
	if err != nil {
		return LogPos{}, err
	}
	var p LogPos
	err = st.QueryRowContext(ctx, v.namespace, v.name).Scan(&p.Vault, &p.Seq, &p.Last)
	if errors.Is(err, sql.ErrNoRows) {
		return LogPos{}, fmt.Errorf("vault %q: %w", v.name, ErrVaultNotFound)
	}
	return p, mapSQLErr(err)
}

// ChangeSeq is LogPos without the audit cursor (Last is 0): the vault's
// id and change sequence number, one indexed row.
func (v *Vault) ChangeSeq(ctx context.Context) (LogPos, error) {
	// The writer's cached row, while no other connection committed since
	// it was cached: no read transaction (whose pages a busy writer keeps
	// making stale).
	s := v.s
	s.lockWriter()
	if s.wconn != nil && s.vrows != nil && s.checkVaultCache(ctx) == nil {
		if r, ok := s.vrows[[2]string{v.namespace, v.name}]; ok {
			s.wmu.Unlock()
			return LogPos{Vault: r.id, Seq: r.seq}, nil
		}
	}
	s.wmu.Unlock()
	st, err := v.s.prepared(ctx, `SELECT id, seq FROM vaults WHERE namespace=? AND name=?`)
	if err != nil {
		return LogPos{}, err
	}
	var p LogPos
	err = st.QueryRowContext(ctx, v.namespace, v.name).Scan(&p.Vault, &p.Seq)
	if errors.Is(err, sql.ErrNoRows) {
		return LogPos{}, fmt.Errorf("vault %q: %w", v.name, ErrVaultNotFound)
	}
	return p, mapSQLErr(err)
}

// LogEntry is one change in a vault's log: an audit event, with the
// change sequence number of its transaction.
type LogEntry struct {
	ID     int64
	Seq    int64
	Action string
	Path   string
	// To is the second path of a rename or copy, "" otherwise.
	To string
}

// Log returns the events of vault id (LogPos.Vault) after event after,
// in order, at most limit of them.
func (s *Store) Log(ctx context.Context, id, after int64, limit int) ([]LogEntry, error) {
	st, err := s.prepared(ctx, `SELECT id, seq, action, path, CASE WHEN json_valid(details) THEN json_extract(details, '$.to') END FROM audit WHERE vault_id=? AND id>? AND imported=0 ORDER BY id LIMIT ?`)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, id, after, limit)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	defer rows.Close()
	var out []LogEntry
	for rows.Next() {
		var e LogEntry
		var to any // a string, or what else a "to" detail may hold
		if err := rows.Scan(&e.ID, &e.Seq, &e.Action, &e.Path, &to); err != nil {
			return nil, mapSQLErr(err)
		}
		e.To, _ = to.(string)
		out = append(out, e)
	}
	return out, mapSQLErr(rows.Err())
}

// Log is Store.Log for this vault's store.
func (v *Vault) Log(ctx context.Context, id, after int64, limit int) ([]LogEntry, error) {
	return v.s.Log(ctx, id, after, limit)
}

// Seq is the change sequence number the transaction commits as: in a
// write, the vault's current one plus one; in a read, the current one.
func (t *Tx) Seq() int64 {
	if t.write {
		return t.v0.seq + 1
	}
	return t.v.seq
}

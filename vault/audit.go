package vault

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// Event is one audit log record.
type Event struct {
	ID        int64          `json:"id"`
	Time      time.Time      `json:"time"`
	Namespace string         `json:"namespace"`
	Vault     string         `json:"vault"`
	Action    string         `json:"action"`
	Path      string         `json:"path"`
	Actor     string         `json:"actor"`
	RequestID string         `json:"request_id"`
	TraceID   string         `json:"trace_id"`
	Details   map[string]any `json:"details"`
}

// AuditFilter selects audit events. Zero fields select everything.
type AuditFilter struct {
	Since   time.Time
	Action  string // exact action, or a prefix ending in "." or "*" ("file.", "checkpoint.*")
	Path    string // this path and everything below it
	AfterID int64  // only events with a larger id (for following)
	Limit   int    // the newest Limit events; 0 = 1000
}

// Audit returns matching events of the vault, oldest first.
func (v *Vault) Audit(ctx context.Context, f AuditFilter) ([]Event, error) {
	return read(ctx, v.s, v.namespace, v.name, func(t *Tx) ([]Event, error) {
		q := `SELECT id, time, namespace, vault, action, path, actor, request_id, trace_id, details FROM audit WHERE vault_id=? AND id>?`
		args := []any{t.v.id, f.AfterID}
		if !f.Since.IsZero() {
			q += ` AND time>=?`
			args = append(args, f.Since.UnixNano())
		}
		if a := strings.TrimSuffix(f.Action, "*"); a != "" {
			if strings.HasSuffix(a, ".") {
				q += ` AND substr(action, 1, ?) = ?`
				args = append(args, len(a), a)
			} else {
				q += ` AND action=?`
				args = append(args, a)
			}
		}
		if p := f.Path; p != "" && p != "/" {
			p = strings.TrimSuffix(p, "/")
			q += ` AND (path=? OR substr(path, 1, ?) = ?)`
			args = append(args, p, len(p)+1, p+"/")
		}
		limit := f.Limit
		if limit <= 0 {
			limit = 1000
		}
		q = `SELECT * FROM (` + q + ` ORDER BY id DESC LIMIT ?) ORDER BY id`
		args = append(args, limit)
		rows, err := t.queryText(q, args...)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		defer rows.Close()
		out := []Event{}
		for rows.Next() {
			var e Event
			var at int64
			var d string
			if err := rows.Scan(&e.ID, &at, &e.Namespace, &e.Vault, &e.Action, &e.Path, &e.Actor, &e.RequestID, &e.TraceID, &d); err != nil {
				return nil, err
			}
			e.Time = time.Unix(0, at).UTC()
			if err := json.Unmarshal([]byte(d), &e.Details); err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, rows.Err()
	})
}

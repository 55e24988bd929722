package vault

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Meta says who asked for a mutation. Its fields land in the audit log;
// RequestID also keys the request log that makes retries idempotent.
type Meta struct {
	Actor     string
	RequestID string
	// ArgsHash is a digest of the request's canonical arguments, logged
	// with RequestID: the same id with other arguments is a conflict.
	ArgsHash string
	TraceID  string
	// Trace is an opaque serialized span context stored with checkpoints so
	// that a later restore can link to the span that saved it.
	Trace string
}

// vaultRow is a vault's row as a transaction sees and changes it.
type vaultRow struct {
	id        int64
	namespace string
	name      string
	createdAt int64
	root      int64
	epoch     int64
	nextIno   int64
	parent    sql.NullString
	files     int64
	dirs      int64
	bytes     int64
	quota     Quota
	worker    string
	seq       int64
}

const vaultCols = `id, namespace, name, created_at, root, epoch, next_ino, parent, files, dirs, bytes, max_size_mb, max_files, max_file_size_mb, worker, seq`

func scanVault(sc interface{ Scan(...any) error }) (vaultRow, error) {
	var r vaultRow
	var ms, mf, mfs sql.NullInt64
	err := sc.Scan(&r.id, &r.namespace, &r.name, &r.createdAt, &r.root, &r.epoch, &r.nextIno, &r.parent,
		&r.files, &r.dirs, &r.bytes, &ms, &mf, &mfs, &r.worker, &r.seq)
	r.quota = Quota{MaxSizeMB: nullToPtr(ms), MaxFiles: nullToPtr(mf), MaxFileSizeMB: nullToPtr(mfs)}
	return r, err
}

func nullToPtr(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	v := n.Int64
	return &v
}

// Tx is one transaction on one vault. Every method of Vault runs in one;
// Vault.Update hands one to callers that batch many changes (imports, a
// burst of writes through the mount) into a single commit.
type Tx struct {
	ctx    context.Context
	tx     *sql.Tx   // a read transaction; nil in a write
	conn   *sql.Conn // the store's writer connection, in a write
	s      *Store
	v      vaultRow
	v0     vaultRow // t.v as loaded: saveVault skips an unchanged row
	meta   Meta
	now    int64
	write  bool
	events []event
	stmts  map[string]*sql.Stmt // the store's prepared statements, bound to tx
	// hist caches the vault's history settings; versions maps each path
	// written in this transaction to the version it records (history.go).
	hist *HistorySettings
	set  *Settings // the vault's own settings, once read (settings.go)
	// copying is set while Copy copies a tree: its files add no unique
	// bytes (checkQuotaUnique); uniq bounds the vault's unique bytes once
	// a unique-mode check counted them (uniqueBound).
	copying  bool
	uniq     *int64
	versions map[string]int64
	// toIndex holds the file nodes this transaction wrote, for the
	// full-text index (search.go).
	toIndex map[int64][]byte
	// owner is who entries created now belong to (AsOwner); unset, they
	// get NoOwner.
	owner    [2]int64
	hasOwner bool
	// modified, if not 0, is the modification time content changes
	// record instead of now (AtTimes).
	modified int64
	// wc keeps the chains of directories walked in this transaction
	// (walk.go).
	wc *walkCache
}

type event struct {
	action  string
	path    string
	details map[string]any
}

// Time is the transaction's clock reading, shared by all its changes.
func (t *Tx) Time() time.Time { return time.Unix(0, t.now) }

// stmt returns a prepared statement for q that runs in this transaction;
// q must be a fixed SQL text (see Store.prepared).
func (t *Tx) stmt(q string) (*sql.Stmt, error) {
	if t.conn != nil {
		return t.s.writerStmt(t.ctx, q)
	}
	if st := t.stmts[q]; st != nil {
		return st, nil
	}
	ps, err := t.s.prepared(t.ctx, q)
	if err != nil {
		return nil, err
	}
	st := t.tx.StmtContext(t.ctx, ps)
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[q] = st
	return st, nil
}

func (t *Tx) exec(q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	r, err := st.ExecContext(t.ctx, args...)
	return r, mapSQLErr(err)
}

// execText runs q unprepared, for statements that are run rarely or that
// name a TEMP table (which exists on one connection only).
func (t *Tx) execText(q string, args ...any) (sql.Result, error) {
	var r sql.Result
	var err error
	if t.conn != nil {
		r, err = t.conn.ExecContext(t.ctx, q, args...)
	} else {
		r, err = t.tx.ExecContext(t.ctx, q, args...)
	}
	return r, mapSQLErr(err)
}

// queryText runs q unprepared, for queries built per call.
func (t *Tx) queryText(q string, args ...any) (*sql.Rows, error) {
	var rows *sql.Rows
	var err error
	if t.conn != nil {
		rows, err = t.conn.QueryContext(t.ctx, q, args...)
	} else {
		rows, err = t.tx.QueryContext(t.ctx, q, args...)
	}
	return rows, mapSQLErr(err)
}

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface{ Scan(...any) error }

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

func (t *Tx) row(q string, args ...any) scanner {
	st, err := t.stmt(q)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(t.ctx, args...)
}

// query runs q. A prepared statement runs once at a time: close the rows
// before running the same text again (collect them first, then recurse).
func (t *Tx) query(q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(t.ctx, args...)
	return rows, mapSQLErr(err)
}

func (t *Tx) audit(action, p string, details map[string]any) {
	t.events = append(t.events, event{action: action, path: p, details: details})
}

func (t *Tx) loadVault(ns, name string) error {
	r, err := scanVault(t.row(`SELECT `+vaultCols+` FROM vaults WHERE namespace=? AND name=?`, ns, name))
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("vault %q: %w", name, ErrVaultNotFound)
	}
	if err != nil {
		return fmt.Errorf("load vault %q: %w", name, mapSQLErr(err))
	}
	t.v, t.v0 = r, r
	t.set = nil // another vault's, if any
	return nil
}

// equal reports whether two vault rows hold the same values.
func (r vaultRow) equal(o vaultRow) bool {
	eq := func(a, b *int64) bool { return a == b || (a != nil && b != nil && *a == *b) }
	return r.id == o.id && r.namespace == o.namespace && r.name == o.name && r.createdAt == o.createdAt &&
		r.root == o.root && r.epoch == o.epoch && r.nextIno == o.nextIno && r.parent == o.parent &&
		r.files == o.files && r.dirs == o.dirs && r.bytes == o.bytes && r.worker == o.worker && r.seq == o.seq &&
		eq(r.quota.MaxSizeMB, o.quota.MaxSizeMB) && eq(r.quota.MaxFiles, o.quota.MaxFiles) &&
		eq(r.quota.MaxFileSizeMB, o.quota.MaxFileSizeMB)
}

// saveVault writes the vault row back, unless nothing in it changed since
// it was loaded or last saved.
func (t *Tx) saveVault() error {
	if t.v.equal(t.v0) {
		return nil
	}
	if only := t.v0; only.seq != t.v.seq {
		only.seq = t.v.seq
		if t.v.equal(only) {
			// Only the change sequence moved (an overwrite, a rename):
			// the narrow statement costs less.
			_, err := t.exec(`UPDATE vaults SET seq=? WHERE id=?`, t.v.seq, t.v.id)
			if err == nil {
				t.v0 = t.v
			}
			return err
		}
	}
	_, err := t.exec(`UPDATE vaults SET root=?, epoch=?, next_ino=?, files=?, dirs=?, bytes=?, max_size_mb=?, max_files=?, max_file_size_mb=?, worker=?, seq=? WHERE id=?`,
		t.v.root, t.v.epoch, t.v.nextIno, t.v.files, t.v.dirs, t.v.bytes,
		ptrToNull(t.v.quota.MaxSizeMB), ptrToNull(t.v.quota.MaxFiles), ptrToNull(t.v.quota.MaxFileSizeMB), t.v.worker, t.v.seq, t.v.id)
	if err == nil {
		t.v0 = t.v
	}
	return err
}

func ptrToNull(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// auditCols is how many values an audit row takes, auditRows how many
// rows auditInsertMany inserts.
const (
	auditCols = 11
	auditRows = 32
)

// auditInsert is the statement that records audit events, one row per
// ? group; auditRows of them at a time (auditInsertMany), the rest one by
// one: a burst of the mount's queued changes (rm -rf of a tree) records
// hundreds of events in one transaction, and a statement's fixed cost is
// most of what a row costs.
var (
	auditInsert     = `INSERT INTO audit(time, vault_id, namespace, vault, action, path, actor, request_id, trace_id, details, seq) VALUES`
	auditRow        = `(?,?,?,?,?,?,?,?,?,?,?)`
	auditInsertOne  = auditInsert + auditRow
	auditInsertMany = auditInsert + auditRow + strings.Repeat(","+auditRow, auditRows-1)
)

func (t *Tx) flushEvents() error {
	args := make([]any, 0, auditCols*min(len(t.events), auditRows))
	for i, e := range t.events {
		d := "{}"
		if len(e.details) > 0 {
			b, err := json.Marshal(e.details)
			if err != nil {
				return fmt.Errorf("audit details: %w", err)
			}
			d = string(b)
		}
		args = append(args, t.now, t.v.id, t.v.namespace, t.v.name, e.action, e.path, t.meta.Actor, t.meta.RequestID, t.meta.TraceID, d, t.v.seq)
		// Rows go in in order, auditRows at a time while that many are
		// left: the same rows, with the same ids, as one at a time.
		q := ""
		switch {
		case len(args) == auditCols*auditRows:
			q = auditInsertMany
		case len(args) == auditCols && len(t.events)-i < auditRows:
			q = auditInsertOne
		}
		if q != "" {
			if _, err := t.exec(q, args...); err != nil {
				return err
			}
			args = args[:0]
		}
	}
	return nil
}

// timeKey carries the time a request's transactions use (WithTime).
type timeKey struct{}

// WithTime makes the write transactions run with ctx use t as their time
// (mtimes, ctimes, audit and checkpoint times), instead of the clock: a
// change replayed from the fleet's change log then gets the times it had
// when it was first made.
func WithTime(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, timeKey{}, t)
}

// txTime is the time of a write transaction under ctx.
func txTime(ctx context.Context, s *Store) time.Time {
	if t, ok := ctx.Value(timeKey{}).(time.Time); ok {
		return t
	}
	return s.now()
}

// seqsKey carries a SeqSpan (RecordSeqs).
type seqsKey struct{}

// SeqSpan is what the write transactions committed under one context
// did to one vault's change sequence (RecordSeqs): the fleet's change
// log learns from it, without reading the store again, whether a
// request's change followed the position it logged last.
type SeqSpan struct {
	ns, name string
	mu       sync.Mutex
	n        int
	from, to LogPos
	gap      bool
}

// RecordSeqs returns a context under which every committed write
// transaction on vault ns/name notes its change sequence in the
// returned span.
func RecordSeqs(ctx context.Context, ns, name string) (context.Context, *SeqSpan) {
	p := &SeqSpan{ns: ns, name: name}
	return context.WithValue(ctx, seqsKey{}, p), p
}

// Span reports the vault's position before the first write transaction
// committed under the span's context and after the last one. ok is false
// when none committed, or when they do not follow each other (the vault
// changed in between by other means, or was replaced): then only a read
// of the store tells.
func (p *SeqSpan) Span() (from, to LogPos, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.from, p.to, p.n > 0 && !p.gap
}

// note records one committed transaction that took the vault from
// before to after (Vault 0: it did not exist then).
func (p *SeqSpan) note(before, after LogPos) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case before.Vault == 0 || after.Vault != before.Vault:
		p.gap = true
	case p.n == 0:
		p.from = before
	case before != p.to:
		p.gap = true
	}
	p.to = after
	p.n++
}

// noteSeqs tells ctx's span, if it follows ns/name, about a committed
// transaction on it.
func noteSeqs(ctx context.Context, ns, name string, before, after vaultRow) {
	if p, _ := ctx.Value(seqsKey{}).(*SeqSpan); p != nil && p.ns == ns && p.name == name {
		p.note(LogPos{Vault: before.id, Seq: before.seq}, LogPos{Vault: after.id, Seq: after.seq})
	}
}

// write runs fn in one BEGIN IMMEDIATE transaction on vault ns/name
// (shared with the writers queued meanwhile: group.go), and returns once
// it is committed. When
// load is false the vault need not exist (create, import). With a request
// id, a result stored earlier for that id is returned instead of running fn
// again, and a new result is stored in the same transaction as fn's changes.
func write[T any](ctx context.Context, s *Store, ns, name string, meta Meta, op string, load bool, fn func(t *Tx) (T, error)) (res T, replayed bool, err error) {
	s.queueWriter()
	m, err := s.join(ctx)
	if err != nil {
		s.wmu.Unlock()
		return res, false, fmt.Errorf("%s: begin: %w", op, err)
	}
	left := false
	defer func() {
		if !left {
			// fn panicked: nothing of this writer's is kept, and the
			// writer lock is not left held.
			s.leave(m, false, nil)
		}
	}()
	t := &Tx{ctx: ctx, conn: m.conn, s: s, meta: meta, now: txTime(ctx, s).UnixNano(), write: true}
	var start vaultRow
	res, replayed, err = func() (res T, replayed bool, err error) {
		key := RequestKey{Namespace: ns, Vault: name, ID: meta.RequestID, Op: op, ArgsHash: meta.ArgsHash}
		if meta.RequestID != "" {
			var storedOp, storedHash string
			var stored []byte
			err := t.row(sqlLookupRequest, ns, name, meta.RequestID).Scan(&storedOp, &storedHash, &stored)
			switch {
			case err == nil:
				if err := key.check(storedOp, storedHash); err != nil {
					return res, false, fmt.Errorf("%s: %w", op, err)
				}
				if err := json.Unmarshal(stored, &res); err != nil {
					return res, false, fmt.Errorf("%s: stored result: %w", op, err)
				}
				return res, true, nil
			case !errors.Is(err, sql.ErrNoRows):
				return res, false, fmt.Errorf("%s: request log: %w", op, mapSQLErr(err))
			}
		}
		if err := s.checkVaultCache(ctx); err != nil {
			return res, false, fmt.Errorf("%s: %w", op, err)
		}
		if load {
			if r, ok := s.vrows[[2]string{ns, name}]; ok {
				t.v, t.v0 = r, r
			} else if err := t.loadVault(ns, name); err != nil {
				return res, false, err
			}
		}
		start = t.v0 // (saveVault moves t.v0)
		res, err = fn(t)
		if err != nil {
			return res, false, err
		}
		if t.v.id != 0 {
			if err := t.relinkDue(); err != nil {
				return res, false, fmt.Errorf("%s: %w", op, err)
			}
		}
		if len(t.toIndex) > 0 {
			if err := t.flushIndex(); err != nil {
				return res, false, fmt.Errorf("%s: %w", op, err)
			}
		}
		if t.v.id != 0 {
			// Every committed transaction on a vault is one step of its
			// change sequence, which mounts follow (log.go).
			t.v.seq = t.v0.seq + 1
			if err := t.saveVault(); err != nil {
				return res, false, fmt.Errorf("%s: %w", op, err)
			}
		}
		if err := t.flushEvents(); err != nil {
			return res, false, fmt.Errorf("%s: %w", op, err)
		}
		if meta.RequestID != "" {
			b, err := json.Marshal(res)
			if err != nil {
				return res, false, fmt.Errorf("%s: encode result: %w", op, err)
			}
			if _, err := t.exec(`INSERT INTO requests(`+requestCols+`) VALUES(?,?,?,?,?,?,?)`,
				key.ID, key.Namespace, key.Vault, key.Op, b, t.now, key.ArgsHash); err != nil {
				return res, false, fmt.Errorf("%s: request log: %w", op, err)
			}
		}
		return res, false, nil
	}()
	if err != nil || replayed {
		// Nothing of this writer's is kept (a replay only read).
		left = true
		s.leave(m, false, nil)
		return res, replayed, err
	}
	// Rows this transaction changed: ns/name's (forget it: fn may have
	// changed it and moved on, as Fork does, or deleted it) and t.v's,
	// as saved. (Set before the commit, for the writers that join the
	// group after this one; a group that fails to commit empties them.)
	delete(s.vrows, [2]string{ns, name})
	if t.v.id != 0 {
		s.vrows[[2]string{t.v.namespace, t.v.name}] = t.v
		if t.uniq != nil {
			s.uniq[t.v.id] = uniqBound{seq: t.v.seq, bytes: *t.uniq}
		}
	} else if t.v0.id != 0 {
		delete(s.uniq, t.v0.id) // the vault is gone
	}
	left = true
	b, _ := ctx.Value(batchKey{}).(*Batch)
	if err := s.leave(m, true, b); err != nil {
		return res, false, fmt.Errorf("%s: commit: %w", op, err)
	}
	noteSeqs(ctx, ns, name, start, t.v)
	if len(t.events) > 0 {
		s.notifyAudit()
	}
	return res, false, nil
}

// read runs fn in a read transaction: a consistent snapshot that never sees
// half of a concurrent restore.
func read[T any](ctx context.Context, s *Store, ns, name string, fn func(t *Tx) (T, error)) (res T, err error) {
	if err := s.commitBatchOf(ctx); err != nil {
		return res, err
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return res, fmt.Errorf("begin read: %w", mapSQLErr(err))
	}
	defer tx.Rollback()
	t := &Tx{ctx: ctx, tx: tx, s: s, now: s.now().UnixNano()}
	if name != "" {
		if err := t.loadVault(ns, name); err != nil {
			return res, err
		}
	}
	return fn(t)
}

package vault

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options tune a Store. The zero value is the default.
type Options struct {
	// Synchronous is SQLite's synchronous pragma. "NORMAL" (default) keeps
	// every committed transaction across a process crash; "FULL" also across
	// power loss, at the price of an fsync per commit.
	Synchronous string
	// BusyTimeout bounds how long a writer waits for another process's
	// write lock before failing with ErrConflict. Default 10 s.
	BusyTimeout time.Duration
	// Now returns the current time; tests may pin it. Default time.Now.
	Now func() time.Time
	// MaxFileSize is the largest size a file may reach, in bytes, in
	// every vault of the store; a write or truncate past it fails with a
	// *QuotaError (Limit "max_file_size"), EFBIG on a mount. Holes cost
	// nothing, so the default, DefaultMaxFileSize, only keeps offsets
	// far from overflowing.
	MaxFileSize int64
	// Defaults are the settings of vaults that do not set their own
	// (settings.go).
	Defaults Defaults
}

// DefaultMaxFileSize is Options.MaxFileSize's default: 1 EiB.
const DefaultMaxFileSize = 1 << 60

// Store is one home's vault database. It is safe for concurrent use by many
// goroutines, and several processes may open the same file.
type Store struct {
	db          *sql.DB
	path        string
	now         func() time.Time
	maxFileSize int64
	defaults    Defaults

	// wmu serialises writers inside this process so they queue in Go
	// instead of spinning in SQLite's busy handler; other processes still
	// wait on the database lock.
	wmu sync.Mutex

	// stmts caches a prepared statement per SQL text (see prepared): the
	// driver parses SQL text again on every call otherwise, which cost
	// about as much as running the statement.
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt

	// Writes run on one dedicated connection (guarded by wmu), with
	// statements prepared on it and BEGIN IMMEDIATE / COMMIT sent as
	// statements: cheaper than a database/sql transaction, which takes a
	// connection from the pool, binds each statement to it, and watches
	// its context from a new goroutine per query.
	wconn  *sql.Conn
	wstmts map[string]*sql.Stmt

	// vrows caches vault rows for writes, by namespace and name, as of
	// the writer connection's PRAGMA data_version vver. That number
	// changes when any other connection, in this process or another,
	// commits, and not when this one does; so while it is unchanged the
	// database holds exactly what this connection last read or wrote, and
	// the cached rows (updated after each commit) are current. Guarded by
	// wmu.
	vrows map[[2]string]vaultRow
	vver  int64
	// uniq holds, per vault id, an upper bound of its unique bytes as of
	// a change sequence number, left by the last committed unique-mode
	// quota check (uniqueBound). Any other commit on the vault moves its
	// sequence and so voids the entry. Guarded by wmu.
	uniq map[int64]uniqBound
	// grp is the write transaction left open on wconn for the writers
	// queued behind its last member (group commit, group.go); nil when
	// none. Guarded by wmu. wwait counts the writers queued on wmu.
	grp   *group
	wwait atomic.Int32
	// lone counts the groups committed in a row with one member, up to
	// loneGroups: below that, writers have been arriving together lately,
	// and one that would commit alone yields first (leave). Guarded by
	// wmu.
	lone int

	// hints remembers where hard-linked inodes have names, to move an
	// inode back out of the hidden directory once it has one name left
	// (relink.go). Memory only: a hint may be stale and is checked.
	hints linkHints

	// auditCh is closed after a commit that adds audit events (see
	// AuditNotify); nil while nobody waits.
	auditMu sync.Mutex
	auditCh chan struct{}
}

const schema = `
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vaults(
	id INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: audit rows and nodes keep a deleted vault's id
	namespace TEXT NOT NULL,
	name TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	root INTEGER NOT NULL,
	epoch INTEGER NOT NULL,
	next_ino INTEGER NOT NULL,
	parent TEXT,
	files INTEGER NOT NULL DEFAULT 0,
	dirs INTEGER NOT NULL DEFAULT 0,
	bytes INTEGER NOT NULL DEFAULT 0,
	max_size_mb INTEGER,
	max_files INTEGER,
	max_file_size_mb INTEGER,
	worker TEXT NOT NULL DEFAULT '',
	seq INTEGER NOT NULL DEFAULT 0, -- change sequence: +1 per committed transaction (log.go)
	UNIQUE(namespace, name)
);
CREATE TABLE IF NOT EXISTS nodes(
	id INTEGER PRIMARY KEY,
	vault INTEGER NOT NULL,
	epoch INTEGER NOT NULL,
	ino INTEGER NOT NULL,
	kind INTEGER NOT NULL,
	mode INTEGER NOT NULL,
	size INTEGER NOT NULL,
	mtime INTEGER NOT NULL,
	ctime INTEGER NOT NULL,
	target TEXT NOT NULL DEFAULT '',
	chunks BLOB,
	uid INTEGER NOT NULL DEFAULT -1, -- NoOwner
	gid INTEGER NOT NULL DEFAULT -1,
	rdev INTEGER NOT NULL DEFAULT 0,
	atime INTEGER NOT NULL DEFAULT 0, -- 0: mtime
	nlink INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS nodes_owner ON nodes(vault, epoch);
CREATE TABLE IF NOT EXISTS dirents(
	dir INTEGER NOT NULL,
	name TEXT NOT NULL,
	child INTEGER NOT NULL,
	PRIMARY KEY(dir, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks(
	id INTEGER PRIMARY KEY,
	hash BLOB NOT NULL UNIQUE,
	data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints(
	vault INTEGER NOT NULL,
	name TEXT NOT NULL,
	root INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	message TEXT NOT NULL DEFAULT '',
	auto INTEGER NOT NULL DEFAULT 0,
	files INTEGER NOT NULL,
	dirs INTEGER NOT NULL,
	bytes INTEGER NOT NULL,
	next_ino INTEGER NOT NULL,
	trace TEXT NOT NULL DEFAULT '',
	PRIMARY KEY(vault, name)
);
CREATE TABLE IF NOT EXISTS audit(
	id INTEGER PRIMARY KEY,
	time INTEGER NOT NULL,
	vault_id INTEGER NOT NULL,
	namespace TEXT NOT NULL,
	vault TEXT NOT NULL,
	action TEXT NOT NULL,
	path TEXT NOT NULL DEFAULT '',
	actor TEXT NOT NULL DEFAULT '',
	request_id TEXT NOT NULL DEFAULT '',
	trace_id TEXT NOT NULL DEFAULT '',
	details TEXT NOT NULL DEFAULT '{}',
	imported INTEGER NOT NULL DEFAULT 0, -- copied from another store: history, not a new event
	seq INTEGER NOT NULL DEFAULT 0 -- the vault's change sequence number of the transaction (log.go)
);
CREATE INDEX IF NOT EXISTS audit_vault ON audit(vault_id, id);
CREATE TABLE IF NOT EXISTS remote_chunks(
	remote TEXT NOT NULL,
	hash BLOB NOT NULL,
	PRIMARY KEY(remote, hash)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ` + requestsTable + `;
`

// uniqBound is an entry of Store.uniq.
type uniqBound struct{ seq, bytes int64 }

// Open opens (creating if needed) the store database at path.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Synchronous == "" {
		opts.Synchronous = "NORMAL"
	}
	switch opts.Synchronous {
	case "OFF", "NORMAL", "FULL", "EXTRA":
	default:
		return nil, fmt.Errorf("open store: synchronous %q: %w", opts.Synchronous, ErrInvalidArgument)
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxFileSize <= 0 || opts.MaxFileSize > DefaultMaxFileSize {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if err := opts.Defaults.Validate(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+opts.Synchronous+")")
	q.Add("_pragma", "cache_size(-32768)")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// Prepared statements live per connection: keep a few idle ones so
	// that they are not closed, and their statements lost, between calls.
	db.SetMaxIdleConns(4)
	s := &Store{db: db, path: path, now: opts.Now, maxFileSize: opts.MaxFileSize, defaults: opts.Defaults, uniq: map[int64]uniqBound{}, stmts: map[string]*sql.Stmt{}}
	if _, err := db.ExecContext(ctx, schema+";"+approvalSchema+";"+historySchema+";"+searchSchema+";"+metaSchema+";"+settingsSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: schema: %w", path, mapSQLErr(err))
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: migrate: %w", path, mapSQLErr(err))
	}
	return s, nil
}

// createPrivate makes sure the database file exists and only its owner
// can read it, whatever the umask: it holds every vault's content. Its
// directory is created 0700 if missing; SQLite gives the -wal and -shm
// files it creates the database's mode, and ones left wider by an older
// version are narrowed here.
func createPrivate(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// migrate brings a store created by an older version up to the schema:
// columns added since are appended, as CREATE TABLE puts them last too.
func migrate(ctx context.Context, db *sql.DB) error {
	for _, c := range []struct{ table, column, def string }{
		{"audit", "imported", "INTEGER NOT NULL DEFAULT 0"},
		{"vaults", "seq", "INTEGER NOT NULL DEFAULT 0"},
		{"audit", "seq", "INTEGER NOT NULL DEFAULT 0"},
		{"vault_settings", "replication", "TEXT"},
	} {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info(?) WHERE name=?`, c.table, c.column).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if _, err := db.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.column+` `+c.def); err != nil {
			return err
		}
	}
	if err := migrateNodes(ctx, db, "main"); err != nil {
		return err
	}
	return migrateRequests(ctx, db)
}

// nodeColsAdded are the node columns added after the first version, with
// their definitions, in the order CREATE TABLE has them.
var nodeColsAdded = [][2]string{
	{"uid", "INTEGER NOT NULL DEFAULT -1"},
	{"gid", "INTEGER NOT NULL DEFAULT -1"},
	{"rdev", "INTEGER NOT NULL DEFAULT 0"},
	{"atime", "INTEGER NOT NULL DEFAULT 0"},
	{"nlink", "INTEGER NOT NULL DEFAULT 1"},
}

// migrateNodes adds the node columns schema db of a store from an older
// version lacks, and counts the links of its directories when it had none.
func migrateNodes(ctx context.Context, c *sql.DB, db string) error {
	for _, col := range nodeColsAdded {
		var n int
		if err := c.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('nodes', ?) WHERE name=?`, db, col[0]).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if _, err := c.ExecContext(ctx, `ALTER TABLE `+db+`.nodes ADD COLUMN `+col[0]+` `+col[1]); err != nil {
			return err
		}
		if col[0] == "nlink" {
			if _, err := c.ExecContext(ctx, `UPDATE `+db+`.nodes SET nlink = 2 + (SELECT count(*) FROM `+db+`.dirents d JOIN `+db+`.nodes c ON c.id = d.child WHERE d.dir = nodes.id AND c.kind = ?) WHERE kind = ?`, KindDir, KindDir); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes the prepared statements and the database.
func (s *Store) Close() error {
	s.lockWriter()
	s.dropWriter(false)
	s.wmu.Unlock()
	s.stmtMu.Lock()
	for q, st := range s.stmts {
		st.Close()
		delete(s.stmts, q)
	}
	s.stmtMu.Unlock()
	return s.db.Close()
}

// prepared returns the store's prepared statement for q, preparing it on
// first use. q must be one of the package's fixed SQL texts, and must not
// name a TEMP table: a statement is prepared again, lazily, on each
// connection that runs it. Use it through Tx.stmt inside transactions.
func (s *Store) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st := s.stmts[q]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	s.stmts[q] = st
	return st, nil
}

// Path is the store's database file.
func (s *Store) Path() string { return s.path }

// Statements of the writer connection, prepared once each.
const (
	sqlBegin    = `BEGIN IMMEDIATE`
	sqlCommit   = `COMMIT`
	sqlRollback = `ROLLBACK`
)

// writerStmt returns q prepared on the writer connection. s.wmu is held.
func (s *Store) writerStmt(ctx context.Context, q string) (*sql.Stmt, error) {
	if st := s.wstmts[q]; st != nil {
		return st, nil
	}
	st, err := s.wconn.PrepareContext(ctx, q)
	if err != nil {
		return nil, mapSQLErr(err)
	}
	s.wstmts[q] = st
	return st, nil
}

// begin opens the write transaction on the writer connection, opening the
// connection first if needed. s.wmu is held.
func (s *Store) begin(ctx context.Context) (*sql.Conn, error) {
	if s.wconn == nil {
		c, err := s.db.Conn(ctx)
		if err != nil {
			return nil, mapSQLErr(err)
		}
		s.wconn, s.wstmts = c, map[string]*sql.Stmt{}
		s.vrows, s.vver = nil, 0
	}
	st, err := s.writerStmt(ctx, sqlBegin)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	if err != nil {
		if errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) {
			s.dropWriter(true)
		}
		return nil, mapSQLErr(err)
	}
	return s.wconn, nil
}

// checkVaultCache empties the vault row cache unless no other connection
// has committed since it was filled. It runs inside the write transaction,
// which holds the write lock, so nothing can commit until it ends.
// s.wmu is held.
func (s *Store) checkVaultCache(ctx context.Context) error {
	st, err := s.writerStmt(ctx, `PRAGMA data_version`)
	if err != nil {
		return err
	}
	var v int64
	if err := st.QueryRowContext(ctx).Scan(&v); err != nil {
		return mapSQLErr(err)
	}
	if s.vrows == nil || v != s.vver {
		s.vrows, s.vver = map[[2]string]vaultRow{}, v
	}
	return nil
}

// commit commits the write transaction. s.wmu is held.
func (s *Store) commit(ctx context.Context) error {
	st, err := s.writerStmt(ctx, sqlCommit)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	return mapSQLErr(err)
}

// rollback ends the write transaction, if one is still open, without
// keeping its changes; it does so even when the request's context is
// done. s.wmu is held.
func (s *Store) rollback(c *sql.Conn) {
	if s.wconn != c {
		return
	}
	ctx := context.Background()
	st, err := s.writerStmt(ctx, sqlRollback)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	if err != nil {
		// Perhaps no transaction was open any more (SQLite ends some on
		// error), perhaps the connection is broken: either way a new one
		// is safe, and closing this one ends any transaction left on it.
		s.dropWriter(true)
	}
}

// dropWriter closes the writer connection's statements and gives the
// connection back, or with bad, discards it; the next write opens a new
// one. s.wmu is held.
func (s *Store) dropWriter(bad bool) {
	if s.wconn == nil {
		return
	}
	for _, st := range s.wstmts {
		st.Close()
	}
	if bad {
		s.wconn.Raw(func(any) error { return driver.ErrBadConn })
	}
	s.wconn.Close()
	s.wconn, s.wstmts = nil, nil
	s.vrows = nil
}

// mapSQLErr turns SQLite's lock errors into ErrConflict so callers can retry.
func mapSQLErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: database is locked: %v", ErrConflict, err)
		}
	}
	return err
}

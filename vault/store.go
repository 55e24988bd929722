package vault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
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
}

// Store is one home's vault database. It is safe for concurrent use by many
// goroutines, and several processes may open the same file.
type Store struct {
	db   *sql.DB
	path string
	now  func() time.Time

	// wmu serialises writers inside this process so they queue in Go
	// instead of spinning in SQLite's busy handler; other processes still
	// wait on the database lock.
	wmu sync.Mutex
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
	chunks BLOB
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
	details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_vault ON audit(vault_id, id);
CREATE TABLE IF NOT EXISTS requests(
	request_id TEXT PRIMARY KEY,
	namespace TEXT NOT NULL,
	vault TEXT NOT NULL,
	op TEXT NOT NULL,
	result BLOB NOT NULL,
	created_at INTEGER NOT NULL
);
`

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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
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
	s := &Store{db: db, path: path, now: opts.Now}
	if _, err := db.ExecContext(ctx, schema+";"+approvalSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: schema: %w", path, mapSQLErr(err))
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Path is the store's database file.
func (s *Store) Path() string { return s.path }

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

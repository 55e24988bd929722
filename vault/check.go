package vault

import (
	"context"
	"fmt"
	"strings"
)

// IntegrityCheck runs SQLite's PRAGMA integrity_check on the store and
// fails, listing SQLite's findings, unless the database is sound.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return fmt.Errorf("integrity check %s: %w", s.path, mapSQLErr(err))
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("integrity check %s: %w", s.path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("integrity check %s: %w", s.path, mapSQLErr(err))
	}
	if len(problems) > 0 {
		return fmt.Errorf("integrity check %s: database is corrupt: %s", s.path, strings.Join(problems, "; "))
	}
	return nil
}

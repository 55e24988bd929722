package config

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The modes of what avfs creates in a home: the home holds every vault's
// content in plain SQLite, so only its owner may enter it, whatever the
// umask.
const (
	HomeMode fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// EnsureDir creates dir (and missing parents) with HomeMode. A directory
// it creates gets exactly that mode; an existing one is left alone (see
// HomeExposed for the warning).
func EnsureDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, HomeMode); err != nil {
		return err
	}
	return os.Chmod(dir, HomeMode)
}

// WriteFile writes b to path, creating its directory with EnsureDir, and
// leaves the file with FileMode even if it existed with a wider one.
func WriteFile(path string, b []byte) error {
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return err
	}
	if err := os.WriteFile(path, b, FileMode); err != nil {
		return err
	}
	return os.Chmod(path, FileMode)
}

// HomeExposed returns a warning when home exists and another user may
// read or enter it, "" otherwise.
func HomeExposed(home string) string {
	st, err := os.Stat(home)
	if err != nil || st.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("home %s has mode %04o: other users may read every vault's content from it; run chmod 700 %s", home, st.Mode().Perm(), home)
}

package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the avfs binary that binary() builds for the failover
// tests (about 50 MB under the system temp directory) once every test
// has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if avfsBin != "" {
		os.RemoveAll(filepath.Dir(avfsBin))
	}
	os.Exit(code)
}

package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/avfs/avfs/exec"
)

// TestMain lets this test binary be re-executed as a sandbox's init, and
// removes the avfs binary that binary() builds for the failover tests
// (about 50 MB under the system temp directory) once every test has run.
func TestMain(m *testing.M) {
	exec.Init()
	code := m.Run()
	if avfsBin != "" {
		os.RemoveAll(filepath.Dir(avfsBin))
	}
	os.Exit(code)
}

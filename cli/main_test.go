package cli

import (
	"context"
	"os"
	"testing"

	"github.com/avfs/avfs/exec"
)

// TestMain lets this test binary be re-executed as a sandbox's init, and
// stand in for avfs: started with AVFS_TEST_AS_AVFS=1 (by a shell in a
// terminal test, through a symlink named avfs) it runs the command line
// instead of the tests.
func TestMain(m *testing.M) {
	exec.Init()
	if os.Getenv("AVFS_TEST_AS_AVFS") == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, Options{}))
	}
	os.Exit(m.Run())
}

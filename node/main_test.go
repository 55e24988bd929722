package node_test

import (
	"os"
	"testing"

	"github.com/avfs/avfs/exec"
)

// TestMain lets this test binary be re-executed as a sandbox's init.
func TestMain(m *testing.M) {
	exec.Init()
	os.Exit(m.Run())
}

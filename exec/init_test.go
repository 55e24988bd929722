package exec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A binary whose main never called Init would not become a sandbox's init
// when re-executed (a test binary would run its tests again, inside the
// sandbox): Run says so and starts nothing.
func TestSandboxNeedsInit(t *testing.T) {
	initCalled.Store(false)
	defer initCalled.Store(true) // TestMain called Init
	ws := t.TempDir()
	sb := &Sandbox{Binds: append(SystemBinds(), Bind{Path: ws, Writable: true})}
	_, err := Run(context.Background(), Spec{Shell: "touch ran", Dir: ws, Sandbox: sb})
	if !errors.Is(err, ErrSandbox) || !strings.Contains(err.Error(), "exec.Init") {
		t.Errorf("got %v, want ErrSandbox naming exec.Init", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the command ran")
	}
}

package cli

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/avfs/avfs/exec"
)

// TestMain lets this test binary be re-executed as a sandbox's init, and
// stand in for avfs: started with AVFS_TEST_AS_AVFS=1 (by a shell in a
// terminal test, through a symlink named avfs) it runs the command line
// instead of the tests.
func TestMain(m *testing.M) {
	exec.Init()
	if len(os.Args) > 2 && os.Args[1] == "keeper" && os.Args[2] == "run" {
		// Started by a test's local exec as the home's exec keeper.
		level := new(slog.LevelVar)
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, Options{Logger: log, Level: level})
		stop()
		os.Exit(code)
	}
	if os.Getenv("AVFS_TEST_AS_AVFS") == "1" {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, Options{}))
	}
	os.Exit(m.Run())
}

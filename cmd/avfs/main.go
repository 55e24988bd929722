// Command avfs is the avfs binary: the CLI, `serve` (the embedded fleet),
// `worker` and `dispatcher`. It only wires: the sandbox's init, signals,
// logging, then the CLI.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/avfs/avfs/cli"
	"github.com/avfs/avfs/exec"
	"github.com/avfs/avfs/mount"
	"github.com/avfs/avfs/telemetry"
)

func main() {
	// A sandboxed exec re-executes this binary as the sandbox's init.
	exec.Init()
	// Before anything is mounted: any avfs process may serve mounts.
	mount.SpareProcs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	level := new(slog.LevelVar) // warn until the CLI reads log_level
	level.Set(slog.LevelWarn)
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{Logger: log, Level: level})
	stop()
	os.Exit(code)
}

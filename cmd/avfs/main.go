// Command avfs is the avfs binary: the CLI, and (as the fleet grows) the
// serve, worker and dispatcher processes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/avfs/avfs/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, cli.Options{})
	stop()
	os.Exit(code)
}

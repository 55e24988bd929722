package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Client sends one request and returns its reply. A transport failure is
// an error; a failed request is a reply with Error set.
type Client interface {
	Do(ctx context.Context, req messages.Request) (messages.Reply, error)
	Close() error
}

// localClient serves requests in-process on the store under --home,
// through the same handler the workers use.
type localClient struct {
	store *vault.Store
	h     *handler.Handler
	close []func() error
}

func openLocal(ctx context.Context, c *config.Config, log *slog.Logger, tp trace.TracerProvider, workerID string) (*localClient, error) {
	st, err := vault.Open(ctx, c.StorePath(), storeOptions(c))
	if err != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "open store: %v", err)
	}
	// In process, this process owns every vault: it deletes the
	// expired ones (forks made with --ttl) as it opens the store.
	if gone, err := st.SweepExpired(ctx, nil); err != nil {
		log.Warn("expiry sweep", telemetry.LogKeyErr, err)
	} else if len(gone) > 0 {
		log.Info("expired vaults deleted", "vaults", gone)
	}
	h := handler.New(st, handler.Options{Worker: workerID, Logger: log, Tracer: tp})
	cl, err := runner.Wire(c, h, log, false)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("set up handler: %w", err)
	}
	return &localClient{store: st, h: h, close: []func() error{cl}}, nil
}

// storeOptions are the vault store's options from the config.
func storeOptions(c *config.Config) vault.Options {
	return vault.Options{Synchronous: c.Store.Synchronous, MaxFileSize: c.Store.MaxFileSize,
		Defaults: vault.Defaults{AutoKeep: c.Checkpoints.AutoKeep, AutoMaxAge: c.Checkpoints.AutoMaxAge, QuotaMode: c.Quota.Mode, Replication: c.Replication}}
}

// natsClient sends requests to a fleet.
type natsClient struct{ c *client.Client }

func (n natsClient) Do(ctx context.Context, req messages.Request) (messages.Reply, error) {
	var rep messages.Reply
	var err error
	if w, ok := ctx.Value(streamKey{}).(streamTo); ok {
		rep, err = n.c.DoOutput(ctx, req, client.StreamTo(w.stdout, w.stderr))
	} else {
		rep, err = n.c.Do(ctx, req)
	}
	var me *messages.Error
	if errors.As(err, &me) {
		return rep, me // refused before it was sent: not a transport failure
	}
	if err != nil {
		return rep, messages.Errorf(messages.CodeUnavailable, "%v", err)
	}
	return rep, nil
}

func (n natsClient) Close() error { return n.c.Close() }

func (l *localClient) Do(ctx context.Context, req messages.Request) (messages.Reply, error) {
	if w, ok := ctx.Value(streamKey{}).(streamTo); ok {
		ctx = runner.WithOutput(ctx, func(stream string, p []byte) {
			if stream == messages.StreamStderr {
				w.stderr.Write(p)
			} else {
				w.stdout.Write(p)
			}
		})
	}
	return l.h.Handle(ctx, req), nil
}

// streamTo is where an exec's output goes while it runs, put in the
// request's context with withStream; both clients honour it.
type streamTo struct{ stdout, stderr io.Writer }

type streamKey struct{}

// withStream asks for the output of the exec sent under ctx to be
// written to stdout and stderr as the command produces it.
func withStream(ctx context.Context, stdout, stderr io.Writer) context.Context {
	return context.WithValue(ctx, streamKey{}, streamTo{stdout, stderr})
}

func (l *localClient) Close() error {
	for _, c := range l.close {
		c()
	}
	return l.store.Close()
}

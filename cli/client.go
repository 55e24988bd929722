package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/runner"
	"github.com/avfs/avfs/vault"
)

// Client sends one request and returns its reply. A transport failure is
// an error; a failed request is a reply with Error set.
type Client interface {
	Do(ctx context.Context, req messages.Request) (messages.Reply, error)
	Close() error
}

// localClient serves requests in-process on the store under --home,
// through a node (the same composition root the workers use).
type localClient struct {
	n     *node.Node
	store *vault.Store
	h     *handler.Handler
}

// openLocal serves requests on the store under c.Home in this process,
// through a node. serving keeps sandbox inits between commands (the exec
// keeper); a one-shot command line starts one per command.
func openLocal(ctx context.Context, c *config.Config, log *slog.Logger, tp trace.TracerProvider, workerID string, serving bool) (*localClient, error) {
	// In process, this process owns every vault: it deletes the
	// expired ones (forks made with --ttl) as it opens the store.
	n, err := node.Open(ctx, node.Options{Config: c, Worker: workerID, Logger: log, Tracer: tp, SweepExpired: true, Serving: serving})
	if err != nil {
		return nil, err
	}
	return &localClient{n: n, store: n.Store(), h: n.Handler()}, nil
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
	return l.n.Handle(ctx, req), nil
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

func (l *localClient) Close() error { return l.n.Close() }

package cli

import (
	"context"
	"fmt"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
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

func openLocal(ctx context.Context, c *config.Config, wire func(*handler.Handler) (func() error, error)) (*localClient, error) {
	st, err := vault.Open(ctx, c.StorePath(), vault.Options{Synchronous: c.Store.Synchronous})
	if err != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "open store: %v", err)
	}
	h := handler.New(st, handler.Options{})
	lc := &localClient{store: st, h: h}
	if wire != nil {
		cl, err := wire(h)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("set up handler: %w", err)
		}
		if cl != nil {
			lc.close = append(lc.close, cl)
		}
	}
	return lc, nil
}

func (l *localClient) Do(ctx context.Context, req messages.Request) (messages.Reply, error) {
	return l.h.Handle(ctx, req), nil
}

func (l *localClient) Close() error {
	for _, c := range l.close {
		c()
	}
	return l.store.Close()
}

package client

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/messages"
)

// A publish or subscribe the NATS server refuses for permissions is not
// an error of the call that made it: the server answers asynchronously,
// and the request would wait for a reply (or an acknowledgement) that
// cannot come. The client watches the connection's asynchronous errors
// instead, and ends a request at once with PERMISSION_DENIED when the
// refusal names its subject or its inbox.

// denials fans the connection's permission violations out to the
// requests waiting.
type denials struct {
	mu      sync.Mutex
	waiters map[chan string]struct{}
}

// watchDenials installs the fan-out as the connection's asynchronous
// error handler, calling the handler set before it too.
func (c *Client) watchDenials() {
	prev := c.nc.Opts.AsyncErrorCB
	c.nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.den.mu.Lock()
			for w := range c.den.waiters {
				select {
				case w <- err.Error():
				default:
				}
			}
			c.den.mu.Unlock()
		}
		if prev != nil {
			prev(nc, sub, err)
		}
	})
}

// whileAllowed returns a context that ends, with a PERMISSION_DENIED
// *messages.Error as its cause, when the server refuses a publish to
// subject or a subscription under the inbox's prefix; stop releases it.
func (c *Client) whileAllowed(ctx context.Context, subject, inbox string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := make(chan string, 1)
	c.den.mu.Lock()
	if c.den.waiters == nil {
		c.den.waiters = map[chan string]struct{}{}
	}
	c.den.waiters[w] = struct{}{}
	c.den.mu.Unlock()
	prefix := inbox[:strings.LastIndexByte(inbox, '.')+1]
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case msg := <-w:
				lower := strings.ToLower(msg)
				switch {
				case strings.Contains(lower, "publish to") && strings.Contains(msg, `"`+subject+`"`):
					cancel(messages.Errorf(messages.CodePermissionDenied, "the NATS server refused this client's publish to %s: its permissions do not cover this namespace or op", subject))
				case strings.Contains(lower, "subscription to") && strings.Contains(msg, `"`+prefix):
					cancel(messages.Errorf(messages.CodePermissionDenied, "the NATS server refused this client's subscription to its inbox %s*: set nats.inbox_prefix (AVFS_NATS_INBOX_PREFIX, or client.InboxPrefix) to the prefix its permissions allow, e.g. _INBOX.<namespace>", prefix))
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		c.den.mu.Lock()
		delete(c.den.waiters, w)
		c.den.mu.Unlock()
		cancel(nil)
	}
}

// denied returns the PERMISSION_DENIED error that ended ctx, if any.
func denied(ctx context.Context) *messages.Error {
	var e *messages.Error
	if errors.As(context.Cause(ctx), &e) {
		return e
	}
	return nil
}

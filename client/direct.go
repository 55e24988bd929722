package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// The direct path (docs/protocol.md, "Direct requests"). The intake
// costs two file-backed JetStream hops per request; a vault's owner can
// answer a short request in a fraction of that. So the client remembers,
// per vault, the worker whose reply said it owns the vault, and sends the
// vault's messages.DirectOp requests to it as core NATS requests. Whenever
// that does not give an answer (the worker says "use the intake", nobody
// listens, the attempt times out) the client forgets the route and sends
// the same request, same id, through the intake: the worker's request log
// applies a mutation that did run once only.

// DefaultDirectTimeout bounds one direct attempt when Client.DirectTimeout
// is zero. Direct ops are short; a worker that does not answer within it
// is taken for gone, and the intake (with its redelivery) takes over.
const DefaultDirectTimeout = 2 * time.Second

// directCooldown is how long a vault goes through the intake only after a
// direct attempt timed out: a deployment whose NATS permissions do not
// let the agent publish direct subjects drops them silently, and every
// request would otherwise wait out a timeout first.
const directCooldown = time.Minute

// route is where a vault's direct requests go.
type route struct {
	worker string
	epoch  int64
	until  time.Time // while worker is "", the cooldown's end
}

// directTo returns the worker to send req to directly, if any.
func (c *Client) directTo(req messages.Request) (string, bool) {
	if c.DisableDirect || !messages.DirectOp(req.Op) {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.routes[messages.VaultKey(req.Namespace, req.Vault)]
	return r.worker, ok && r.worker != ""
}

// learn records the owner a reply names for req's vault. A reply with a
// lower epoch than the one known comes from a replaced owner and is
// ignored.
func (c *Client) learn(req messages.Request, h nats.Header) {
	if req.Vault == "" || c.DisableDirect {
		return
	}
	key := messages.VaultKey(req.Namespace, req.Vault)
	if req.Op == messages.OpVaultDelete {
		c.forget(req.Namespace, req.Vault, false)
		return
	}
	w := h.Get(messages.HeaderWorker)
	epoch, err := strconv.ParseInt(h.Get(messages.HeaderOwnerEpoch), 10, 64)
	if w == "" || err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.routes[key]
	if ok && (cur.worker == "" && time.Now().Before(cur.until) || cur.worker != "" && epoch < cur.epoch) {
		return
	}
	if c.routes == nil {
		c.routes = map[string]route{}
	}
	c.routes[key] = route{worker: w, epoch: epoch}
}

// forget drops ns/vault's route; with cooldown, replies do not teach a
// new one for directCooldown.
func (c *Client) forget(ns, vault string, cooldown bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := messages.VaultKey(ns, vault)
	if !cooldown {
		delete(c.routes, key)
		return
	}
	if c.routes == nil {
		c.routes = map[string]route{}
	}
	c.routes[key] = route{until: time.Now().Add(directCooldown)}
}

// sendDirect sends req to worker w as a core NATS request. served is
// false when the request must go through the intake instead: then cause
// says why, and the request did not run or, after a timeout, may still
// run, which its request id makes harmless.
func (c *Client) sendDirect(ctx context.Context, w string, req messages.Request, body []byte) (rep messages.Reply, served bool, cause error) {
	d := c.DirectTimeout
	if d <= 0 {
		d = DefaultDirectTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	msg := nats.NewMsg(messages.DirectSubject(w, req.Namespace, req.Vault, req.Op))
	msg.Data = body
	telemetry.Inject(ctx, msg.Header)
	msg.Header.Set(messages.HeaderRequestID, req.RequestID)
	// The attempt's own deadline: a copy still queued when the client
	// has moved on to the intake is answered TIMEOUT instead of running.
	if dl, ok := dctx.Deadline(); ok {
		msg.Header.Set(messages.HeaderDeadline, dl.UTC().Format(time.RFC3339Nano))
	}
	m, err := c.nc.RequestMsgWithContext(dctx, msg)
	if err != nil {
		return rep, false, err
	}
	if r := m.Header.Get(messages.HeaderUseIntake); r != "" {
		return rep, false, fmt.Errorf("%w: %s", errUseIntake, r)
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return rep, true, fmt.Errorf("decode reply: %w", err)
	}
	c.learn(req, m.Header)
	return rep, true, nil
}

// errUseIntake is a worker's answer that it did not serve a direct request.
var errUseIntake = errors.New("worker says use the intake")

// do sends req directly when a route is known, else, or when the direct
// attempt gives no answer, through the intake.
func (c *Client) do(ctx context.Context, subject string, req messages.Request, span trace.Span, out func(messages.OutputChunk)) (messages.Reply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return messages.Reply{}, err
	}
	if max := c.MaxRequest(); len(body) > max {
		return messages.Reply{}, tooLarge(req, len(body), max)
	}
	if w, ok := c.directTo(req); ok && !viaIntake(ctx) {
		rep, served, cause := c.sendDirect(ctx, w, req, body)
		if served {
			span.SetAttributes(attribute.String("avfs.path", "direct"), attribute.String("avfs.worker", w))
			return rep, cause
		}
		timedOut := errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, nats.ErrTimeout)
		c.forget(req.Namespace, req.Vault, timedOut)
		span.AddEvent("direct fallback", trace.WithAttributes(attribute.String("avfs.worker", w), attribute.String("reason", cause.Error())))
		if ctx.Err() != nil {
			return messages.Reply{}, fmt.Errorf("%w: %s %s: direct to %s: %w", ErrUnavailable, req.Op, req.RequestID, w, cause)
		}
	}
	span.SetAttributes(attribute.String("avfs.path", "intake"))
	return c.send(ctx, subject, req, body, out)
}

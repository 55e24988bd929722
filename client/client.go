// Package client is the Go client agents use to drive an avfs fleet over
// NATS: it publishes requests into the fleet's durable intake, or sends a
// vault's short requests straight to the vault's owner once a reply named
// it (direct.go), and waits for their replies, with request ids generated
// here so that a retry is recognised and never applied twice.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// ErrUnavailable means the fleet could not be reached or did not answer.
var ErrUnavailable = errors.New("fleet unavailable")

// Client talks to a fleet through one NATS connection.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
	// Timeout bounds a request when its context has no deadline.
	Timeout time.Duration
	// Tracer records a send span per request and propagates its context
	// in the request's headers; nil means no tracing.
	Tracer trace.TracerProvider
	// DisableDirect sends every request through the intake. By default
	// a vault's short requests (messages.DirectOp) go straight to the
	// worker whose last reply said it owns the vault, falling back to the
	// intake when that worker does not serve them; see direct.go. Set it
	// before the first request.
	DisableDirect bool
	// DirectTimeout bounds one direct attempt before the request goes
	// through the intake; zero means DefaultDirectTimeout.
	DirectTimeout time.Duration

	mu     sync.Mutex
	routes map[string]route // "<ns>.<vault>" -> where direct requests go
	den    denials          // the server's permission refusals (denied.go)
}

// InboxPrefix is the connection option that makes replies come back
// under prefix, for an agent whose permissions let it subscribe only
// there (docs/nats-permissions.example.conf: _INBOX.<namespace>):
//
//	nc, err := nats.Connect(url, nats.UserInfo(user, pw), client.InboxPrefix("_INBOX.team-a"))
//
// JetStream publish acknowledgements and direct replies use it too. The
// prefix must start with _INBOX (messages.ValidReplyTo): workers and
// dispatchers send replies nowhere else.
func InboxPrefix(prefix string) nats.Option {
	return func(o *nats.Options) error {
		if err := ValidInboxPrefix(prefix); err != nil {
			return err
		}
		return nats.CustomInboxPrefix(prefix)(o)
	}
}

// ValidInboxPrefix checks an inbox prefix for InboxPrefix.
func ValidInboxPrefix(prefix string) error {
	if !messages.ValidReplyTo(prefix) || strings.HasSuffix(prefix, ".") || strings.Contains(prefix, "..") {
		return fmt.Errorf("inbox prefix %q: want _INBOX or _INBOX.<tokens>, without wildcards", prefix)
	}
	return nil
}

// New wraps a connection.
func New(nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, js: js, Timeout: 10 * time.Minute}
	c.watchDenials()
	return c, nil
}

// NewRequestID returns a fresh, time-ordered request id.
func NewRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return fmt.Sprintf("%013x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// Do sends req and waits for its reply. A request without an id gets one.
// Sending the same request again (same id) is safe: the fleet answers
// with the first result.
func (c *Client) Do(ctx context.Context, req messages.Request) (messages.Reply, error) {
	return c.doOutput(ctx, req, nil)
}

// DoOutput is Do for an exec.run request that also calls fn with each
// chunk of the command's output while it runs, in order, before it
// returns the reply (docs/protocol.md, "Live output"). Chunks are best
// effort: the envelope in the reply is the record. A redelivered request
// runs the command again; its chunks carry the next Attempt and start
// over at Seq 1.
func (c *Client) DoOutput(ctx context.Context, req messages.Request, fn func(messages.OutputChunk)) (messages.Reply, error) {
	return c.doOutput(ctx, req, fn)
}

func (c *Client) doOutput(ctx context.Context, req messages.Request, out func(messages.OutputChunk)) (messages.Reply, error) {
	if req.RequestID == "" {
		req.RequestID = NewRequestID()
	}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	subject := messages.RequestSubject(req.Namespace, req.Vault, req.Op)
	// The send span covers the request until its reply: the agent's view
	// of it. Its context travels in the headers to the dispatcher.
	// Links put in ctx with telemetry.WithLinks go on this span (an
	// attempt's exec links to its fork), and its context is handed back
	// to a caller that asked with telemetry.RecordSpan.
	ctx, span := telemetry.Provider(c.Tracer).Tracer(tracerName).Start(ctx, "send",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(telemetry.LinksFrom(ctx)...),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("avfs.op", string(req.Op)),
			attribute.String("avfs.namespace", req.Namespace),
			attribute.String("avfs.vault", req.Vault),
			attribute.String("avfs.request_id", req.RequestID),
		))
	defer span.End()
	telemetry.NoteSpan(ctx, span.SpanContext())
	ctx = telemetry.WithoutLinks(ctx)
	rep, err := c.do(ctx, subject, req, span, out)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case rep.Error != nil:
		span.SetStatus(codes.Error, string(rep.Error.Code))
	}
	return rep, err
}

// tracerName is the instrumentation scope of the client's spans.
const tracerName = "github.com/avfs/avfs/client"

// send publishes req (encoded as body) to the intake and waits for its
// reply, learning from the reply's headers which worker owns the vault.
// With out, the reply and the output chunks come to one subscription
// (<inbox>.reply, <inbox>.out), so the chunks, published before the
// reply, are all seen first.
func (c *Client) send(ctx context.Context, subject string, req messages.Request, body []byte, out func(messages.OutputChunk)) (messages.Reply, error) {
	inbox := c.nc.NewInbox()
	ctx, stop := c.whileAllowed(ctx, subject, inbox)
	defer stop()
	replyTo, outTo := inbox, ""
	if out != nil {
		replyTo, outTo = inbox+".reply", inbox+".out"
		inbox += ".*"
	}
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return messages.Reply{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer sub.Unsubscribe()
	msg := nats.NewMsg(subject)
	msg.Data = body
	telemetry.Inject(ctx, msg.Header)
	msg.Header.Set(messages.HeaderRequestID, req.RequestID)
	msg.Header.Set(messages.HeaderReplyTo, replyTo)
	if outTo != "" {
		msg.Header.Set(messages.HeaderOutputTo, outTo)
	}
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(messages.HeaderDeadline, dl.UTC().Format(time.RFC3339Nano))
	}
	msgID := messages.IntakeMsgID(req.Namespace, req.Vault, req.RequestID)
	ack, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	if err == nil && ack.Duplicate {
		// The intake already holds (or held) this request id and will not
		// take it again, so this caller would wait forever. Send it under
		// a fresh message id: the worker's request log still answers it
		// with the first result instead of applying it twice.
		_, err = c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID+"."+NewRequestID()))
	}
	if e := denied(ctx); e != nil {
		return messages.Reply{RequestID: req.RequestID, Error: e}, nil
	}
	if errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) || errors.Is(err, nats.ErrMaxPayload) {
		// No retry can help: the fleet caps requests (nats.max_request_bytes).
		return messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeInvalidArgument,
			"%s request of %d bytes is larger than the fleet accepts: %v", req.Op, len(body), err)}, nil
	}
	if err != nil {
		return messages.Reply{}, fmt.Errorf("%w: publish %s: %v", ErrUnavailable, req.Op, err)
	}
	m, err := sub.NextMsgWithContext(ctx)
	for ; err == nil && outTo != "" && m.Subject == outTo; m, err = sub.NextMsgWithContext(ctx) {
		var ch messages.OutputChunk
		if json.Unmarshal(m.Data, &ch) == nil {
			out(ch)
		}
	}
	if e := denied(ctx); e != nil {
		return messages.Reply{RequestID: req.RequestID, Error: e}, nil
	}
	if err != nil {
		return messages.Reply{}, fmt.Errorf("%w: waiting for %s %s: %v", ErrUnavailable, req.Op, req.RequestID, err)
	}
	var rep messages.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return rep, fmt.Errorf("decode reply: %w", err)
	}
	c.learn(req, m.Header)
	return rep, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.nc.Close()
	return nil
}

// Call sends op with args and decodes the result into out; a failed
// request returns its *messages.Error.
func (c *Client) Call(ctx context.Context, ns, vault string, op messages.Op, args, out any) error {
	return call(ctx, c, messages.Request{Op: op, Namespace: ns, Vault: vault}, args, out)
}

// call sends req, with args as its arguments, through d and decodes the
// result into out; a failed request returns its *messages.Error.
func call(ctx context.Context, d Doer, req messages.Request, args, out any) error {
	if args != nil {
		if s, bad := messages.InvalidString(args); bad {
			return messages.ErrNotUTF8(s)
		}
		b, err := json.Marshal(args)
		if err != nil {
			return err
		}
		req.Args = b
	}
	rep, err := d.Do(ctx, req)
	if err != nil {
		return err
	}
	if rep.Error != nil {
		return rep.Error
	}
	if out != nil {
		return json.Unmarshal(rep.Result, out)
	}
	return nil
}

// Exec runs a command in a vault and returns its envelope.
func (c *Client) Exec(ctx context.Context, ns, vault string, args messages.ExecArgs) (messages.Envelope, error) {
	var env messages.Envelope
	err := c.Call(ctx, ns, vault, messages.OpExec, args, &env)
	return env, err
}

// ExecStream is Exec that also writes the command's output to stdout and
// stderr (either may be nil) as the command produces it. A redelivered
// request runs the command again, and its output is written again after
// a line on stderr saying so.
func (c *Client) ExecStream(ctx context.Context, ns, vault string, args messages.ExecArgs, stdout, stderr io.Writer) (messages.Envelope, error) {
	var env messages.Envelope
	err := call(ctx, outputDoer{c, StreamTo(stdout, stderr)}, messages.Request{Op: messages.OpExec, Namespace: ns, Vault: vault}, args, &env)
	return env, err
}

// StreamTo returns a DoOutput callback that writes stdout and stderr
// chunks to the writers (nil drops a stream), in order, and says on
// stderr when a chunk was lost or a new attempt started over.
func StreamTo(stdout, stderr io.Writer) func(messages.OutputChunk) {
	attempt, seq := 0, int64(0)
	return func(ch messages.OutputChunk) {
		switch {
		case attempt != 0 && ch.Attempt != attempt:
			note(stderr, "\n[avfs: attempt %d runs the command again]\n", ch.Attempt)
		case ch.Seq > seq+1:
			note(stderr, "\n[avfs: %d output chunks lost; the envelope has the output]\n", ch.Seq-seq-1)
		}
		attempt, seq = ch.Attempt, ch.Seq
		w := stdout
		if ch.Stream == messages.StreamStderr {
			w = stderr
		}
		if w != nil {
			w.Write(ch.Data)
		}
	}
}

func note(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format, args...)
	}
}

// outputDoer sends through DoOutput.
type outputDoer struct {
	c  *Client
	fn func(messages.OutputChunk)
}

func (d outputDoer) Do(ctx context.Context, req messages.Request) (messages.Reply, error) {
	return d.c.DoOutput(ctx, req, d.fn)
}

// Fork forks src into dst.
func (c *Client) Fork(ctx context.Context, ns, src, dst, checkpoint string) (messages.ForkResult, error) {
	var r messages.ForkResult
	err := c.Call(ctx, ns, src, messages.OpVaultFork, messages.VaultForkArgs{Target: dst, Checkpoint: checkpoint}, &r)
	return r, err
}

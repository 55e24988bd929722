package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// maxDeliveriesAdvisory is the subject JetStream publishes on when a
// consumer of the work stream gives up on a message.
const maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + messages.StreamWork + ".*"

// deliveryExceeded is the part of JetStream's
// io.nats.jetstream.advisory.v1.max_deliver advisory the dispatcher uses.
type deliveryExceeded struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// watchDead dead-letters the work messages that exhaust a worker
// consumer's deliveries. The subscription is a queue group, so with
// several dispatchers each advisory is handled once.
func (d *Dispatcher) watchDead(ctx context.Context) (*nats.Subscription, error) {
	return d.nc.QueueSubscribe(maxDeliveriesAdvisory, "avfs-dlq", func(m *nats.Msg) {
		var adv deliveryExceeded
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			d.log.Warn("max deliveries advisory", telemetry.LogKeyErr, err, "data", string(m.Data))
			return
		}
		if err := d.deadLetterWork(ctx, adv); err != nil {
			d.log.Warn("dead-letter", "seq", adv.StreamSeq, "consumer", adv.Consumer, telemetry.LogKeyErr, err)
		}
	})
}

// deadLetterWork moves a work message that ran out of deliveries to the
// dead-letter stream and answers its caller.
func (d *Dispatcher) deadLetterWork(ctx context.Context, adv deliveryExceeded) error {
	st, err := d.js.Stream(ctx, messages.StreamWork)
	if err != nil {
		return err
	}
	raw, err := st.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acknowledged late, or already dead-lettered
	}
	if err != nil {
		return err
	}
	parts := strings.SplitN(raw.Subject, ".", 7)
	if len(parts) != 7 {
		return fmt.Errorf("bad work subject %q", raw.Subject)
	}
	worker, ns, vault, op := parts[3], parts[4], parts[5], messages.Op(parts[6])
	if vault == messages.NoVault {
		vault = ""
	}
	if id, ok := strings.CutPrefix(adv.Consumer, messages.WorkConsumerPrefix); ok {
		worker = id
	}
	reason := fmt.Sprintf("max deliveries (%d) exceeded on worker %s", adv.Deliveries, worker)
	return d.deadLetter(ctx, ns, vault, op, raw.Header, raw.Data, reason, worker, func() error {
		if err := st.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("delete work message %d: %w", adv.StreamSeq, err)
		}
		return nil
	})
}

// deadLetter stores a request in the dead-letter stream, runs settle to
// take it off the stream it came from, and only then tells its caller, if
// it named a valid inbox, that it was dead-lettered: a caller that sees
// the reply finds the request in the dead-letter stream and nowhere else.
func (d *Dispatcher) deadLetter(ctx context.Context, ns, vault string, op messages.Op, hdr nats.Header, data []byte, reason, worker string, settle func() error) error {
	dead := nats.NewMsg(messages.DLQSubject(ns, vault, op))
	dead.Data = data
	for k, v := range hdr {
		dead.Header[k] = v
	}
	// No deduplication in the dead-letter stream: the same request may
	// die again after a replay.
	dead.Header.Del(nats.MsgIdHdr)
	dead.Header.Set(messages.HeaderDeadReason, reason)
	dead.Header.Set(messages.HeaderDeadWorker, worker)
	ack, err := d.js.PublishMsg(ctx, dead)
	if err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	rid := hdr.Get(messages.HeaderRequestID)
	d.log.Warn("dead-lettered request", telemetry.LogKeyRequest, rid, "op", op, telemetry.LogKeyNamespace, ns, telemetry.LogKeyVault, vault, "reason", reason, "dlq_seq", ack.Sequence)
	if err := settle(); err != nil {
		return err
	}
	if to := hdr.Get(messages.HeaderReplyTo); messages.ValidReplyTo(to) {
		e := messages.Errorf(messages.CodeUnavailable, "request %s was dead-lettered: %s (avfs fleet dlq replay %d)", rid, reason, ack.Sequence)
		b, _ := json.Marshal(messages.Reply{RequestID: rid, Error: e})
		d.nc.Publish(to, b)
	}
	return nil
}

// DeadLetters lists the dead-letter stream.
func DeadLetters(ctx context.Context, js jetstream.JetStream) (messages.DeadLetters, error) {
	out := messages.DeadLetters{Dead: []messages.DeadLetter{}}
	st, err := js.Stream(ctx, messages.StreamDLQ)
	if err != nil {
		return out, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return out, err
	}
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // replayed or dropped
		}
		if err != nil {
			return out, err
		}
		out.Dead = append(out.Dead, deadLetter(raw))
	}
	return out, nil
}

func deadLetter(raw *jetstream.RawStreamMsg) messages.DeadLetter {
	ns, vault, op, _ := messages.ParseDLQSubject(raw.Subject)
	return messages.DeadLetter{
		Seq: raw.Sequence, Subject: raw.Subject, Op: op, Namespace: ns, Vault: vault,
		RequestID: raw.Header.Get(messages.HeaderRequestID), Reason: raw.Header.Get(messages.HeaderDeadReason),
		Worker: raw.Header.Get(messages.HeaderDeadWorker), Time: raw.Time.UTC().Format(time.RFC3339Nano),
	}
}

func getDead(ctx context.Context, js jetstream.JetStream, seq uint64) (jetstream.Stream, *jetstream.RawStreamMsg, error) {
	st, err := js.Stream(ctx, messages.StreamDLQ)
	if err != nil {
		return nil, nil, err
	}
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil, messages.Errorf(messages.CodeNotFound, "no dead letter %d", seq)
	}
	return st, raw, err
}

// Replay puts dead letter seq back into the intake and removes it from
// the dead-letter stream. It keeps the request id (in the body and
// Avfs-Request-Id), so the vault's request log still answers a request
// that had in fact completed with its first result instead of applying it
// twice; it gets a new Nats-Msg-Id, since the old one may still be inside
// the intake's deduplication window. The caller's old deadline is dropped.
//
// The replay starts a new trace: a root span dlq.replay from tp (nil
// means none) linked to the original request's span, whose context the
// replayed message carries, so its route and process spans join the new
// trace. Without a recording tracer the message keeps its old
// traceparent.
func Replay(ctx context.Context, js jetstream.JetStream, tp trace.TracerProvider, seq uint64) (messages.DLQReplayed, error) {
	st, raw, err := getDead(ctx, js, seq)
	if err != nil {
		return messages.DLQReplayed{}, err
	}
	ns, vault, op, ok := messages.ParseDLQSubject(raw.Subject)
	if !ok {
		return messages.DLQReplayed{}, messages.Errorf(messages.CodeInvalidArgument, "bad dead-letter subject %q", raw.Subject)
	}
	rid := raw.Header.Get(messages.HeaderRequestID)
	if rid == "" {
		var req messages.Request
		json.Unmarshal(raw.Data, &req)
		rid = req.RequestID
	}
	orig := trace.SpanContextFromContext(telemetry.Extract(context.Background(), raw.Header))
	var links []trace.Link
	if orig.IsValid() {
		links = append(links, trace.Link{SpanContext: orig, Attributes: []attribute.KeyValue{attribute.String("avfs.link", "dead_letter")}})
	}
	ctx, span := telemetry.Provider(tp).Tracer("github.com/avfs/avfs/dispatcher").Start(ctx, "dlq.replay",
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.Int64("avfs.dlq_seq", int64(seq)),
			attribute.String("avfs.op", string(op)), attribute.String("avfs.namespace", ns), attribute.String("avfs.vault", vault),
			attribute.String("avfs.request_id", rid)))
	defer span.End()
	msg := nats.NewMsg(messages.RequestSubject(ns, vault, op))
	msg.Data = raw.Data
	for k, v := range raw.Header {
		msg.Header[k] = v
	}
	if span.SpanContext().IsValid() {
		delete(msg.Header, "traceparent")
		delete(msg.Header, "tracestate")
		telemetry.Inject(ctx, msg.Header)
	}
	for _, h := range []string{messages.HeaderDeadReason, messages.HeaderDeadWorker, messages.HeaderDeadline} {
		msg.Header.Del(h)
	}
	msgID := rid
	if msgID == "" {
		msgID = "dlq"
	}
	msg.Header.Set(nats.MsgIdHdr, msgID+".replay."+strconv.FormatUint(seq, 10))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		telemetry.Fail(span, err)
		return messages.DLQReplayed{}, messages.Errorf(messages.CodeUnavailable, "replay %d: %v", seq, err)
	}
	if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return messages.DLQReplayed{}, fmt.Errorf("replayed %d but could not remove it: %w", seq, err)
	}
	return messages.DLQReplayed{Replayed: seq, RequestID: rid}, nil
}

// Drop deletes dead letter seq.
func Drop(ctx context.Context, js jetstream.JetStream, seq uint64) (messages.DLQDropped, error) {
	st, _, err := getDead(ctx, js, seq)
	if err != nil {
		return messages.DLQDropped{}, err
	}
	if err := st.DeleteMsg(ctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return messages.DLQDropped{}, messages.Errorf(messages.CodeNotFound, "no dead letter %d", seq)
		}
		return messages.DLQDropped{}, err
	}
	return messages.DLQDropped{Dropped: seq}, nil
}

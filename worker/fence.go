package worker

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// maxFenced is how many times a request may be sent back for routing
// before it is answered with an error: ownership that keeps moving under
// it means the fleet is unsettled, and the caller may retry later.
const maxFenced = 3

// fence decides whether this worker may serve req: a vault is served
// only by its owner in BucketOwners. A worker that lost a vault (its
// heartbeat lapsed and the vault was reassigned at a higher epoch) but
// still receives requests for it, say ones forwarded by a dispatcher
// whose view lagged, sends them back to the intake, where a dispatcher
// routes them to the current owner. It reports the owner (Epoch 0 when
// the fleet records none) and whether the request was dealt with here.
func (s *Server) fence(ctx context.Context, msg delivery, req messages.Request, replyTo string) (messages.Owner, bool) {
	if req.Vault == "" {
		return messages.Owner{}, false
	}
	o, ok := s.owned.Cached(req.Namespace, req.Vault)
	if !ok || o.Worker != s.id {
		// The watch may lag behind a placement made just now: ask the
		// bucket before refusing.
		var err error
		if o, ok, err = s.owned.Get(ctx, req.Namespace, req.Vault); err != nil {
			s.log.WarnContext(ctx, "owner lookup failed; serving", telemetry.LogKeyVault, req.Vault, telemetry.LogKeyErr, err)
			return messages.Owner{}, false
		}
	}
	if !ok {
		return messages.Owner{}, false // no fleet placement: a worker addressed directly
	}
	if o.Worker == s.id {
		return o, false
	}
	if _, direct := msg.(directMsg); direct {
		// Ownership moved while it waited in the queue; the client
		// sends it to the intake itself.
		trace.SpanFromContext(ctx).SetAttributes(attribute.String("avfs.use_intake", intakeNotOwner))
		s.useIntake(replyTo, req.RequestID, intakeNotOwner)
		return o, true
	}
	n, _ := strconv.Atoi(msg.Headers().Get(messages.HeaderFenced))
	if n >= maxFenced {
		s.reply(replyTo, req, messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeUnavailable,
			"vault %q changed owner %d times while this request was routed; retry", req.Vault, n)})
		msg.Term()
		return o, true
	}
	// An approval op goes back on the "_" token it came in on: the
	// dispatcher routes it by its approval again.
	subjVault := req.Vault
	if messages.ApprovalOp(req.Op) {
		subjVault = ""
	}
	back := nats.NewMsg(messages.RequestSubject(req.Namespace, subjVault, req.Op))
	back.Data = msg.Data()
	for k, v := range msg.Headers() {
		back.Header[k] = v
	}
	// A new message id for each return: the intake already holds the
	// request's own id, and an earlier return's, in its deduplication
	// window.
	back.Header.Set(nats.MsgIdHdr, messages.IntakeMsgID(req.Namespace, subjVault, req.RequestID)+".fenced-"+strconv.FormatInt(o.Epoch, 10)+"-"+strconv.Itoa(n+1))
	back.Header.Set(messages.HeaderFenced, strconv.Itoa(n+1))
	telemetry.Inject(ctx, back.Header)
	// A duplicate is this same return made before (this message was
	// redelivered after a lost ack): it is in the intake already.
	if _, err := s.js.PublishMsg(ctx, back); err != nil {
		s.log.WarnContext(ctx, "fenced request not sent back", telemetry.LogKeyRequest, req.RequestID, telemetry.LogKeyErr, err)
		msg.Nak() // try again later
		return o, true
	}
	s.log.InfoContext(ctx, "not the owner: request sent back for routing", telemetry.LogKeyVault, req.Vault, "owner", o.Worker, telemetry.LogKeyEpoch, o.Epoch, telemetry.LogKeyRequest, req.RequestID)
	msg.Ack()
	return o, true
}

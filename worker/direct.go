package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// The direct path (docs/protocol.md, "Direct requests"): a client that
// learned a vault's owner from a reply sends that vault's short requests
// as core NATS requests on messages.DirectSubject, skipping the intake
// and work streams. They join the same per-vault queues as work-stream
// messages, so per-vault order and the concurrency limit hold across both
// paths. A worker serves a direct request only while it owns the vault;
// otherwise it answers at once with messages.HeaderUseIntake and the
// client resends the request, same id, through the intake.

// directQueueMax is how many requests a vault's queue may hold for a
// direct request to join it. Past it the worker answers "use the intake",
// where JetStream holds the excess: a direct request must not wait behind
// a long queue without the stream's redelivery, and work-stream messages
// (at most MaxAckPending) must always fit in the queue (see put).
const directQueueMax = 64

// delivery is one request for a vault queue: a work-stream message or a
// direct core NATS request. jetstream.Msg provides all but replyTo; for a
// direct request the acknowledgements are no-ops, since nothing
// redelivers it.
type delivery interface {
	Subject() string
	Data() []byte
	Headers() nats.Header
	Metadata() (*jetstream.MsgMetadata, error)
	Ack() error
	Nak() error
	InProgress() error
	Term() error
	// replyTo is where the Reply is published.
	replyTo() string
}

// streamMsg is a work-stream message; its reply goes to the caller's
// Avfs-Reply-To header, since the NATS reply subject carries the acks.
type streamMsg struct{ jetstream.Msg }

func (m streamMsg) replyTo() string { return m.Headers().Get(messages.HeaderReplyTo) }

// directMsg is a direct request; its reply goes to its NATS reply subject.
type directMsg struct{ m *nats.Msg }

var errNotStream = errors.New("direct request: no stream metadata")

func (d directMsg) Subject() string                           { return d.m.Subject }
func (d directMsg) Data() []byte                              { return d.m.Data }
func (d directMsg) Headers() nats.Header                      { return d.m.Header }
func (d directMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, errNotStream }
func (d directMsg) Ack() error                                { return nil }
func (d directMsg) Nak() error                                { return nil }
func (d directMsg) InProgress() error                         { return nil }
func (d directMsg) Term() error                               { return nil }
func (d directMsg) replyTo() string                           { return d.m.Reply }

// Reasons sent in messages.HeaderUseIntake.
const (
	intakeOp       = "op"        // the op does not take the direct path
	intakeNotOwner = "not-owner" // this worker does not own the vault (now)
	intakeBusy     = "busy"      // the vault's queue is full
	intakeStopping = "stopping"  // the worker is shutting down
)

// serveDirect subscribes to this worker's direct subject. The returned
// stop must be called before the vault queues are drained: after it, no
// direct request joins a queue.
func (s *Server) serveDirect() (stop func(), err error) {
	sub, err := s.nc.Subscribe(messages.SubjectDirect+"."+s.id+".>", s.direct)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return func() {
		if err := sub.Unsubscribe(); err != nil {
			s.log.Warn("direct unsubscribe", telemetry.LogKeyErr, err)
		}
		s.mu.Lock()
		s.directOff = true
		s.mu.Unlock()
	}, nil
}

// direct takes one direct request: it queues it, or answers "use the
// intake" and does nothing else.
func (s *Server) direct(m *nats.Msg) {
	// avfs.v1.direct.<worker>.<ns>.<vault>.<op>
	parts := strings.SplitN(m.Subject, ".", 7)
	reason := ""
	switch {
	case len(parts) != 7 || !messages.DirectOp(messages.Op(parts[6])):
		reason = intakeOp
	case !s.owns(parts[4], parts[5]):
		reason = intakeNotOwner
	default:
		reason = s.put(directMsg{m}, directQueueMax)
	}
	if reason != "" {
		s.useIntake(m.Reply, m.Header.Get(messages.HeaderRequestID), reason)
	}
}

// owns reports whether the owners cache names this worker as the owner
// of ns/vault.
func (s *Server) owns(ns, vault string) bool {
	_, ok := s.ownEpoch(ns, vault)
	return ok
}

// ownEpoch returns the owner epoch of ns/vault when the owners cache
// names this worker as its owner; ok is false otherwise.
func (s *Server) ownEpoch(ns, vault string) (epoch int64, ok bool) {
	if s.owned == nil {
		return 0, false
	}
	o, ok := s.owned.Cached(ns, vault)
	return o.Epoch, ok && o.Worker == s.id
}

// useIntake answers a direct request that was not served.
func (s *Server) useIntake(to, requestID, reason string) {
	h := nats.Header{}
	h.Set(messages.HeaderUseIntake, reason)
	s.publishReply(to, h, messages.Reply{RequestID: requestID,
		Error: messages.Errorf(messages.CodeUnavailable, "worker %s did not serve this direct request (%s): send it to the intake", s.id, reason)})
}

// reply publishes rep for req to the caller. It names this worker and,
// when the owners cache says this worker owns req's vault, the owner
// epoch: that is what lets a client send the vault's next requests here
// directly.
func (s *Server) reply(to string, req messages.Request, rep messages.Reply) {
	h := nats.Header{}
	if req.Vault != "" {
		if epoch, ok := s.ownEpoch(req.Namespace, req.Vault); ok {
			h.Set(messages.HeaderOwnerEpoch, strconv.FormatInt(epoch, 10))
		}
	}
	s.publishReply(to, h, rep)
}

func (s *Server) publishReply(to string, h nats.Header, rep messages.Reply) {
	if !messages.ValidReplyTo(to) {
		if to != "" {
			s.log.Warn("refused reply subject", "subject", to, telemetry.LogKeyRequest, rep.RequestID)
		}
		return
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return
	}
	h.Set(messages.HeaderWorker, s.id)
	if err := s.nc.PublishMsg(&nats.Msg{Subject: to, Header: h, Data: b}); err != nil {
		s.log.Warn("reply", telemetry.LogKeyRequest, rep.RequestID, telemetry.LogKeyErr, err)
	}
}

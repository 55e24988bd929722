package worker

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// auditBatch is how many audit events one pass publishes at most.
const auditBatch = 256

// auditLinger is how long the publisher waits after a commit woke it.
const auditLinger = 2 * time.Millisecond

// AuditCursorKey is the key, in the store's meta table, of the id of the
// last audit event worker published to the audit stream: a restarted
// worker resumes after it.
func AuditCursorKey(worker string) string { return "audit_stream." + worker }

// publishAudit tails the store's audit table by id and publishes every
// event to messages.StreamAudit until ctx ends, then makes one last pass
// (bounded by a few seconds) so that the events of the requests that
// finished while the worker drained go out too. Requests never wait for
// it: they only commit their rows, and this catches up.
//
// An event is published at least once; its Nats-Msg-Id makes the stream
// keep it once, as long as a republication falls in the stream's
// duplicates window (the cursor is recorded about every second, so only
// the last second's events before a crash are ever published again).
func (s *Server) publishAudit(ctx context.Context) {
	st := s.store
	key := AuditCursorKey(s.id)
	var last int64
	if v, ok, err := st.Meta(ctx, key); err != nil {
		s.log.Warn("audit stream cursor", telemetry.LogKeyErr, err)
	} else if ok {
		last, _ = strconv.ParseInt(v, 10, 64)
	}
	// The cursor is written at most once a second (and at the end), so
	// that a busy worker does not add a commit per batch to the writers'
	// queue; a crash republishes at most that second's events, which the
	// stream drops as duplicates.
	saved, savedAt := last, time.Time{}
	save := func(ctx context.Context, force bool) {
		if last == saved || (!force && time.Since(savedAt) < time.Second) {
			return
		}
		if err := st.SetMeta(ctx, key, strconv.FormatInt(last, 10)); err != nil {
			s.log.Warn("audit stream cursor", telemetry.LogKeyErr, err)
			return
		}
		saved, savedAt = last, time.Now()
	}
	tick := time.NewTicker(s.o.AuditPoll)
	defer tick.Stop()
	failing := false
	for {
		wake := st.AuditNotify()
		n, err := s.publishAuditBatch(ctx, &last)
		if err != nil && ctx.Err() == nil {
			if !failing {
				s.log.Warn("audit stream publish", telemetry.LogKeyErr, err)
			}
			failing = true
		} else if err == nil {
			failing = false
		}
		save(ctx, false)
		if err == nil && n == auditBatch {
			continue // more are waiting
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				n, err := s.publishAuditBatch(fctx, &last)
				if err != nil || n < auditBatch {
					save(fctx, true)
					return
				}
			}
		case <-wake:
			// Linger a moment so that a busy worker's commits go out in
			// batches rather than one publishing pass per commit.
			time.Sleep(auditLinger)
		case <-tick.C:
		}
	}
}

// publishAuditBatch publishes the events after *last, at most auditBatch,
// and advances *last past those JetStream acknowledged, in order.
func (s *Server) publishAuditBatch(ctx context.Context, last *int64) (int, error) {
	st := s.store
	evs, err := st.AuditSince(ctx, *last, auditBatch)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	acks := make([]jetstream.PubAckFuture, 0, len(evs))
	var perr error
	for _, e := range evs {
		b, err := json.Marshal(handler.AuditEvent(e))
		if err != nil {
			perr = err
			break
		}
		m := nats.NewMsg(messages.AuditSubject(e.Namespace, e.Vault, e.Action))
		m.Data = b
		m.Header.Set(messages.HeaderMsgID, messages.AuditMsgID(s.id, e.ID))
		if e.RequestID != "" {
			m.Header.Set(messages.HeaderRequestID, e.RequestID)
		}
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			perr = err
			break
		}
		acks = append(acks, f)
	}
	done := *last
	timeout := time.After(10 * time.Second)
	for i, f := range acks {
		select {
		case <-f.Ok():
			done = evs[i].ID
			continue
		case err := <-f.Err():
			perr = err
		case <-ctx.Done():
			perr = ctx.Err()
		case <-timeout:
			perr = context.DeadlineExceeded
		}
		break
	}
	*last = done
	if perr != nil {
		return 0, perr
	}
	return len(evs), nil
}

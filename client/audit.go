package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/messages"
)

// FollowOptions select the audit events FollowAudit delivers.
type FollowOptions struct {
	Vault  string    // "" for every vault of the namespace
	Action string    // exact action, or a prefix ending in "." or "*"
	Path   string    // this path and everything below it
	Since  time.Time // first event stored at or after this; zero = from now on
}

// FollowAudit calls fn with each audit event of namespace ns published to
// the audit stream (messages.StreamAudit) that matches o, in stream
// order, until ctx ends (then it returns nil) or fn fails. It reads
// through an ordered consumer filtered on
// avfs.v1.audit.<ns>.<vault>.<action...>, so NATS permissions on the
// audit subjects confine it like requests.
func (c *Client) FollowAudit(ctx context.Context, ns string, o FollowOptions, fn func(messages.AuditEvent) error) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{messages.AuditFilterSubject(ns, o.Vault, o.Action)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	if !o.Since.IsZero() {
		t := o.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	cons, err := c.js.OrderedConsumer(ctx, messages.StreamAudit, cfg)
	if err != nil {
		return fmt.Errorf("follow audit: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow audit: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	filter := messages.AuditArgs{Action: o.Action, Path: o.Path}
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("follow audit: %w", err)
		}
		var e messages.AuditEvent
		if err := json.Unmarshal(msg.Data(), &e); err != nil {
			continue // not an event of this contract; skip it
		}
		if !filter.Matches(e.Action, e.Path) {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

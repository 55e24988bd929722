package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
)

// followPoll is how often local `audit --follow` looks for events written
// by other processes; commits in this process wake it at once.
const followPoll = 200 * time.Millisecond

// auditFollow prints the matching events the query finds, then every new
// one as it is recorded, until the command's context ends (a signal).
// In JSON mode each event is one JSON document on its own line (JSON
// lines): --follow is the one exception to "one JSON document on stdout".
// Over NATS it reads the audit stream (avfs.v1.audit.<ns>.<vault>.>)
// with an ordered consumer; in-process it polls the store's audit table
// by id.
func (a *app) auditFollow(cmd *cobra.Command, vaultName string, args messages.AuditArgs) error {
	ctx := cmd.Context()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	started := time.Now()
	var hist messages.AuditResult
	if _, err := a.do(ctx, messages.OpAudit, vaultName, args, &hist); err != nil {
		return err
	}
	if !a.json {
		fmt.Fprintf(a.stdout, followRow, "ID", "TIME", "ACTION", "PATH", "ACTOR")
	}
	for _, e := range hist.Events {
		if err := a.printEvent(e); err != nil {
			return err
		}
	}
	switch c := c.(type) {
	case natsClient:
		// Start a little before the query so that nothing committed
		// around it is missed (clocks differ), and drop what the query
		// already printed.
		seen := map[string]bool{}
		for _, e := range hist.Events {
			seen[eventKey(e)] = true
		}
		err := c.c.FollowAudit(ctx, a.cfg.Namespace, client.FollowOptions{Vault: vaultName, Action: args.Action, Path: args.Path, Since: started.Add(-2 * time.Second)},
			func(e messages.AuditEvent) error {
				if seen[eventKey(e)] {
					return nil
				}
				return a.printEvent(e)
			})
		if err != nil {
			return messages.Errorf(messages.CodeUnavailable, "%v", err)
		}
		return nil
	case *localClient:
		// Ids grow across the whole store: start after the vault's newest
		// event, filtered or not.
		var newest messages.AuditResult
		if _, err := a.do(ctx, messages.OpAudit, vaultName, messages.AuditArgs{Limit: 1}, &newest); err != nil {
			return err
		}
		var last int64
		if n := len(newest.Events); n > 0 {
			last = newest.Events[n-1].ID
		}
		for _, e := range hist.Events {
			last = max(last, e.ID)
		}
		return a.pollAudit(ctx, c, vaultName, args, last)
	default:
		return messages.Errorf(messages.CodeInvalidArgument, "--follow is not supported by this client")
	}
}

// pollAudit prints the local store's matching events after id last.
func (a *app) pollAudit(ctx context.Context, c *localClient, vaultName string, args messages.AuditArgs, last int64) error {
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		wake := c.store.AuditNotify()
		evs, err := c.store.AuditSince(ctx, last, 1000)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return &requestError{handler.ToError(err)}
		}
		for _, ev := range evs {
			last = ev.ID
			if ev.Namespace != a.cfg.Namespace || ev.Vault != vaultName || !args.Matches(ev.Action, ev.Path) {
				continue
			}
			if err := a.printEvent(handler.AuditEvent(ev)); err != nil {
				return err
			}
		}
		if len(evs) == 1000 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// printEvent prints one followed event: a JSON line, or a row.
func (a *app) printEvent(e messages.AuditEvent) error {
	if a.json {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(a.stdout, followRow, fmt.Sprint(e.ID), stamp(e.Time), e.Action, e.Path, e.Actor)
	return err
}

// followRow lays out the rows of `audit --follow` in fixed columns: a
// stream cannot be aligned after the fact as a table is.
const followRow = "%-7s %-20s %-20s %-32s %s\n"

// eventKey identifies an event across the query and the stream.
func eventKey(e messages.AuditEvent) string {
	return strconv.FormatInt(e.ID, 10) + "|" + e.Time + "|" + e.Action + "|" + e.Path + "|" + e.RequestID
}

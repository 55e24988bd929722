package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// Doer answers requests: a *Client, or anything that serves them the same
// way (the CLI's in-process handler).
type Doer interface {
	Do(ctx context.Context, req messages.Request) (messages.Reply, error)
}

// Attempts describes a parallel attempts run: fork From (at Checkpoint, if
// set) once per command, run each command in its fork, all at once.
type Attempts struct {
	From       string
	Checkpoint string
	Commands   []messages.ExecArgs
	// Keep says which forks remain afterwards: "all" (default), "best"
	// (the fastest that exited 0) or "none".
	Keep string
	// Placement of the forks (messages.VaultForkArgs): default
	// messages.PlacementSpread, so the attempts run across the fleet's
	// workers.
	Placement string
	// Merge "best" merges the best attempt back into From
	// (messages.OpVaultMerge) before unkept forks are deleted; "" merges
	// nothing.
	Merge string
	// Parallel is how many attempts fork and run at a time (default
	// DefaultParallel): each holds a fork, its mount and a command.
	Parallel int
	// Actor is recorded in the vaults' audit logs.
	Actor string
	// RequestID, when set, makes the whole set retryable: every fork,
	// exec, merge and delete gets an id derived from it
	// (RequestID.fork.N, .exec.N, .merge, .delete.N) and the forks' names
	// are derived from it too, so running the same set again with the
	// same RequestID is answered from the vaults' request logs instead of
	// forking and running again. "" gives fresh ids.
	RequestID string
	// Tracer records an attempts.run span over the forks and execs,
	// each exec linked to its fork; nil means no tracing.
	Tracer trace.TracerProvider
}

// RunAttempts runs a on the fleet c is connected to, in namespace ns.
func (c *Client) RunAttempts(ctx context.Context, ns string, a Attempts) (messages.AttemptsResult, error) {
	if a.Tracer == nil {
		a.Tracer = c.Tracer
	}
	return RunAttempts(ctx, c, ns, a)
}

// MaxAttempts bounds the attempts of one run, DefaultParallel how many
// run at a time unless Attempts.Parallel says otherwise.
const (
	MaxAttempts     = 100
	DefaultParallel = 8
)

// RunAttempts runs a through d in namespace ns. An attempt whose fork or
// exec fails carries its error; the run fails only when a is malformed or
// an unkept fork cannot be deleted.
func RunAttempts(ctx context.Context, d Doer, ns string, a Attempts) (messages.AttemptsResult, error) {
	if a.From == "" {
		return messages.AttemptsResult{}, messages.Errorf(messages.CodeInvalidArgument, "attempts need a vault to fork")
	}
	if len(a.Commands) == 0 {
		return messages.AttemptsResult{}, messages.Errorf(messages.CodeInvalidArgument, "attempts need at least one command")
	}
	if len(a.Commands) > MaxAttempts {
		return messages.AttemptsResult{}, messages.Errorf(messages.CodeInvalidArgument, "%d attempts: at most %d in one run (each is a fork of the vault)", len(a.Commands), MaxAttempts)
	}
	switch {
	case a.Parallel == 0:
		a.Parallel = DefaultParallel
	case a.Parallel < 0:
		return messages.AttemptsResult{}, messages.Errorf(messages.CodeInvalidArgument, "parallel %d: want at least 1", a.Parallel)
	}
	switch a.Keep {
	case "":
		a.Keep = "all"
	case "all", "best", "none":
	default:
		return messages.AttemptsResult{}, messages.Errorf(messages.CodeInvalidArgument, "keep %q: want best, all or none", a.Keep)
	}
	if a.Merge != "" && a.Merge != "best" {
		return messages.AttemptsResult{}, messages.Errorf(messages.CodeInvalidArgument, "merge %q: want best", a.Merge)
	}
	if a.Placement == "" {
		a.Placement = messages.PlacementSpread
	}
	send := func(ctx context.Context, id string, op messages.Op, vault string, args, out any) error {
		return call(ctx, d, messages.Request{Op: op, Namespace: ns, Vault: vault, RequestID: id, Actor: a.Actor}, args, out)
	}
	// One span for the attempt set: each fork is a send under it, and
	// each attempt's exec links to the fork it runs in.
	ctx, span := telemetry.Provider(a.Tracer).Tracer("github.com/avfs/avfs/client").Start(ctx, "attempts.run",
		trace.WithAttributes(attribute.String("avfs.vault", a.From), attribute.Int("avfs.attempts", len(a.Commands))))
	defer span.End()
	// Unique per run, so two runs in the same second cannot collide;
	// with a RequestID, the same for every run of it.
	stamp := time.Now().UTC().Format("20060102t150405") + "-" + NewRequestID()[13:17]
	if a.RequestID != "" {
		sum := sha256.Sum256([]byte(a.RequestID))
		stamp = "r" + hex.EncodeToString(sum[:6])
	}
	id := func(kind string, i int) string {
		if a.RequestID == "" {
			return NewRequestID()
		}
		if i < 0 {
			return a.RequestID + "." + kind
		}
		return fmt.Sprintf("%s.%s.%d", a.RequestID, kind, i+1)
	}
	res := messages.AttemptsResult{From: a.From, Attempts: make([]messages.Attempt, len(a.Commands)), Kept: []string{}}
	var wg sync.WaitGroup
	slots := make(chan struct{}, a.Parallel)
	for i, x := range a.Commands {
		at := &res.Attempts[i]
		*at = messages.Attempt{Vault: fmt.Sprintf("%s-attempt-%s-%02d", a.From, stamp, i+1), Command: x.CommandLine()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
				at.Error = asError(ctx.Err())
				return
			}
			var fr messages.ForkResult
			var fork trace.SpanContext
			args := messages.VaultForkArgs{Target: at.Vault, Checkpoint: a.Checkpoint, Placement: a.Placement}
			// A fork placed on another worker may be made but not yet
			// handed over (UNAVAILABLE): the same request again finishes
			// the handover rather than leaving the fork behind.
			fid := id("fork", i)
			var err error
			for try := 0; try < 3; try++ {
				if err = send(telemetry.RecordSpan(ctx, &fork), fid, messages.OpVaultFork, a.From, args, &fr); !isUnavailable(err) {
					break
				}
				time.Sleep(time.Duration(try+1) * 500 * time.Millisecond)
			}
			if err != nil {
				at.Error = asError(err)
				return
			}
			at.Fork = &fr
			var env messages.Envelope
			ectx := telemetry.WithLinks(ctx, trace.Link{SpanContext: fork, Attributes: []attribute.KeyValue{attribute.String("avfs.link", "fork")}})
			if err := send(ectx, id("exec", i), messages.OpExec, at.Vault, x, &env); err != nil {
				at.Error = asError(err)
				return
			}
			at.Envelope = &env
		}()
	}
	wg.Wait()
	best := -1
	for i, at := range res.Attempts {
		e := at.Envelope
		if e == nil || e.Status != messages.StatusCompleted || e.ExitCode == nil || *e.ExitCode != 0 {
			continue
		}
		if best < 0 || e.DurationMS < res.Attempts[best].Envelope.DurationMS {
			best = i
		}
	}
	if best >= 0 {
		res.Best = &res.Attempts[best].Vault
	}
	if a.Merge == "best" {
		res.Merge, res.MergeError = mergeBest(ctx, send, id("merge", -1), a.From, res.Best)
	}
	var errs []error
	for i, at := range res.Attempts {
		if at.Fork == nil {
			continue
		}
		if a.Keep == "all" || (a.Keep == "best" && res.Best != nil && *res.Best == at.Vault) {
			res.Kept = append(res.Kept, at.Vault)
			continue
		}
		if err := send(ctx, id("delete", i), messages.OpVaultDelete, at.Vault, nil, nil); err != nil {
			errs = append(errs, fmt.Errorf("delete attempt %s: %w", at.Vault, err))
		}
	}
	return res, errors.Join(errs...)
}

// mergeBest merges attempt best (nil: none exited 0) into from.
func mergeBest(ctx context.Context, send func(ctx context.Context, id string, op messages.Op, vault string, args, out any) error, id, from string, best *string) (*messages.MergeResult, *messages.Error) {
	if best == nil {
		return nil, messages.Errorf(messages.CodeNotFound, "no attempt completed with exit status 0: nothing merged into %q", from)
	}
	var mr messages.MergeResult
	if err := send(ctx, id, messages.OpVaultMerge, from, messages.VaultMergeArgs{Fork: *best}, &mr); err != nil {
		return nil, asError(err)
	}
	return &mr, nil
}

func isUnavailable(err error) bool {
	var e *messages.Error
	return errors.As(err, &e) && e.Code == messages.CodeUnavailable
}

func asError(err error) *messages.Error {
	var e *messages.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return messages.Errorf(messages.CodeTimeout, "%v", err)
	}
	return messages.Errorf(messages.CodeUnavailable, "%v", err)
}

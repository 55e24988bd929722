package worker

import (
	"context"
	"time"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// keepExec keeps an exec's effect, in sync or async mode, before its
// reply. Most execs change files, and a snapshot keeps them
// (snapshotFor). One that changed nothing its change summary counts (no
// file added, modified or deleted, no checkpoint, no approval waiting)
// left only its request-log row and its exec.run audit event: a
// LogResult entry carrying both keeps it, and a new owner records them
// without running anything (replayEntry), as a fork's row is kept. That
// is one append instead of a snapshot push, whose cost grows with the
// vault (decisions §42).
//
// The entry stands for the copy only when the exec's own transactions
// were the vault's only ones since its last entry (span, as logOp
// checks); access times its reads moved through its mount are among
// them, and are held by the vault's next snapshot, as a disk holds them
// lazily. Otherwise, or when its row or event cannot be read back, the
// snapshot keeps everything.
func (l *changelog) keepExec(ctx context.Context, c handler.Call, res any, owner messages.Owner, mode string, span *vault.SeqSpan) error {
	req := c.Request
	k := vkey{req.Namespace, req.Vault}
	snap := func() error { return l.snapshotFor(ctx, c, owner, mode) }
	env, ok := res.(messages.Envelope)
	if !ok || req.RequestID == "" || !changedNothing(env) {
		return snap()
	}
	pre, pos, spanned := span.Span()
	lp, known := l.local(ctx, k)
	if !spanned {
		// No transaction of its own: a retry answered from its stored
		// result. Unless something else changed the copy, nothing to keep.
		cur, err := l.st.Vault(k.ns, k.vault).ChangeSeq(ctx)
		if err == nil && known && lp.pos == cur {
			return nil
		}
		return snap()
	}
	if !known || lp.pos != pre {
		return snap()
	}
	argsHash := handler.HashArgs(c.Args)
	raw, stored, err := l.st.StoredResult(ctx, vault.RequestKey{Namespace: k.ns, Vault: k.vault, ID: req.RequestID, Op: string(req.Op), ArgsHash: argsHash})
	if err != nil || !stored {
		return snap()
	}
	ev, found, err := l.execEvent(ctx, k, req.RequestID)
	if err != nil || !found {
		return snap()
	}
	e := messages.ChangeEntry{Kind: messages.LogResult, Epoch: owner.Epoch, Worker: l.s.id, Time: time.Now().UTC().Format(time.RFC3339Nano),
		Request: &req, Result: raw, ArgsHash: argsHash, Audit: []messages.AuditEvent{ev}}
	b, err := messages.EncodeEntry(e)
	if err != nil || len(b) > maxEntry {
		return snap()
	}
	return l.appendAt(ctx, k, b, pos)
}

// changedNothing reports whether env is an exec's that left the vault's
// files, checkpoints and approvals as they were.
func changedNothing(env messages.Envelope) bool {
	switch env.Status {
	case messages.StatusCompleted, messages.StatusTimedOut, messages.StatusDenied, messages.StatusFailedToStart, messages.StatusLimitExceeded:
	default:
		return false // approval_required adds an approval; canceled stores no result
	}
	ch := env.Changes
	return env.Checkpoint == nil && env.ApprovalID == nil &&
		(ch == nil || len(ch.Added)+len(ch.Modified)+len(ch.Deleted) == 0)
}

// execEvent reads back the exec.run event request id id recorded in k.
func (l *changelog) execEvent(ctx context.Context, k vkey, id string) (messages.AuditEvent, bool, error) {
	evs, err := l.st.Vault(k.ns, k.vault).Audit(ctx, vault.AuditFilter{Action: "exec.run", Limit: 1})
	if err != nil || len(evs) == 0 || evs[0].RequestID != id {
		return messages.AuditEvent{}, false, err
	}
	return handler.AuditEvent(evs[0]), true, nil
}

package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nuid"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Merges across workers. vault.merge runs on the target's owner and
// needs the fork's current tree in its store. A fork this worker owns is
// there (before() reconciles it); a fork another worker owns (forks
// spread by placement) is asked for: this worker sends the fork's owner
// a peer vault.push, the owner pushes the fork's current state as it
// pushes after a checkpoint (chunks the bucket lacks, a manifest, the
// head) and answers with the head, and this worker pulls that manifest,
// fetching only the chunks its store lacks, under a temporary name of
// its own. The merge reads the copy, never the fork's own entry in this
// store, and the copy is deleted after it. The fork's owner is not
// changed, and nothing of the copy is pushed.

// mergeOp serves vault.merge (it replaces the handler's own, which it
// calls).
func (s *Server) mergeOp(ctx context.Context, req messages.Request, a messages.VaultMergeArgs) (messages.MergeResult, error) {
	if a.Fork == "" || !messages.ValidName(a.Fork) || a.Fork == req.Vault {
		return s.h.MergeAs(ctx, req, a, "") // the handler answers the bad request
	}
	o, known, err := s.owned.Get(ctx, req.Namespace, a.Fork)
	if err != nil {
		return messages.MergeResult{}, messages.Errorf(messages.CodeUnavailable, "owner of vault %q: %v; retry", a.Fork, err)
	}
	if !known || o.Worker == s.id {
		return s.h.MergeAs(ctx, req, a, "")
	}
	local, err := s.ho.fetchCopy(ctx, req.Namespace, a.Fork, o.Worker)
	if err != nil {
		return messages.MergeResult{}, err
	}
	defer func() {
		if err := s.store.Delete(context.WithoutCancel(ctx), req.Namespace, local, vault.Meta{Actor: "worker:" + s.id}); err != nil {
			s.log.Warn("merge: drop the copy of a fork", telemetry.LogKeyNamespace, req.Namespace, telemetry.LogKeyVault, local, telemetry.LogKeyErr, err)
		}
	}()
	return s.h.MergeAs(ctx, req, a, local)
}

// fetchCopy asks worker owner to push vault ns/name and pulls that push
// into this store under a new name, which it returns.
func (h *handoff) fetchCopy(ctx context.Context, ns, name, owner string) (string, error) {
	body, _ := json.Marshal(messages.PushArgs{Vault: name})
	rep, err := h.s.pr.request(ctx, owner, messages.Request{Op: messages.OpVaultPush, Namespace: ns, RequestID: "push-" + nuid.Next(),
		Actor: "worker:" + h.s.id, Args: body}, pushTimeout)
	if err != nil {
		return "", messages.Errorf(messages.CodeUnavailable, "vault %q: its owner %s did not push it for the merge: %v; retry", name, owner, err)
	}
	if rep.Error != nil {
		return "", rep.Error
	}
	var hd messages.Head
	if err := json.Unmarshal(rep.Result, &hd); err != nil || hd.Object == "" {
		return "", messages.Errorf(messages.CodeUnavailable, "vault %q: its owner %s answered no pushed copy (%v); retry", name, owner, err)
	}
	if err := h.open(ctx); err != nil {
		return "", messages.Errorf(messages.CodeUnavailable, "vault %q: %v; retry", name, err)
	}
	local := "merge-" + nuid.Next() // [0-9A-Za-z]: a valid vault name, and no user's
	if err := h.pull(ctx, vkey{ns, local}, hd, false, ""); err != nil {
		return "", messages.Errorf(messages.CodeUnavailable, "vault %q: pull the copy %s pushed: %v; retry", name, owner, err)
	}
	return local, nil
}

// servePush answers a peer's vault.push: this worker, the vault's owner,
// pushes it now and answers with the head of that push.
func (h *handoff) servePush(ctx context.Context, req messages.Request) messages.Reply {
	fail := func(code messages.Code, format string, args ...any) messages.Reply {
		return messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(code, format, args...)}
	}
	var a messages.PushArgs
	if json.Unmarshal(req.Args, &a) != nil || !messages.ValidName(a.Vault) {
		return fail(messages.CodeInvalidArgument, "vault.push needs a vault name")
	}
	k := vkey{req.Namespace, a.Vault}
	o, known, err := h.s.owned.Get(ctx, k.ns, k.vault)
	switch {
	case err != nil:
		return fail(messages.CodeUnavailable, "owner of vault %q: %v", k.vault, err)
	case !known || o.Worker != h.s.id:
		return fail(messages.CodeUnavailable, "vault %q is not served by worker %s", k.vault, h.s.id)
	}
	if err := h.reconcile(ctx, k, o.Epoch, ""); err != nil {
		return fail(messages.CodeUnavailable, "vault %q: its copy on %s is not current: %v", k.vault, h.s.id, err)
	}
	asked := time.Now()
	h.markDirty(k)
	select {
	case <-h.schedule(k, pushAction{reason: string(messages.OpVaultMerge)}):
	case <-ctx.Done():
		return fail(messages.CodeTimeout, "push of %q: %v", k.vault, ctx.Err())
	}
	hd, _, ok, err := h.head(ctx, k)
	if err != nil || !ok || hd.Deleted || hd.Store != h.storeID {
		return fail(messages.CodeUnavailable, "push of %q for a merge did not land (%v)", k.vault, err)
	}
	if at, err := time.Parse(time.RFC3339Nano, hd.Time); err != nil || at.Before(asked.Add(-time.Second)) {
		return fail(messages.CodeUnavailable, "push of %q for a merge did not land: the head is from %s", k.vault, hd.Time)
	}
	b, err := json.Marshal(hd)
	if err != nil {
		return fail(messages.CodeInternal, "%v", err)
	}
	return messages.Reply{RequestID: req.RequestID, Result: b}
}

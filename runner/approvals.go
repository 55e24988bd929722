package runner

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// held is what an approval stores: the request to run once granted.
type held struct {
	Request  messages.Request  `json:"request"`
	Args     messages.ExecArgs `json:"args"`
	Decision messages.Decision `json:"decision"`
}

// hold records a command that needs an operator's approval.
func (r *Runner) hold(ctx context.Context, req messages.Request, a messages.ExecArgs, d messages.Decision) (string, error) {
	id := newID("apr-")
	req.Args = nil
	b, err := json.Marshal(held{Request: req, Args: a, Decision: d})
	if err != nil {
		return "", err
	}
	now := r.now()
	err = r.store.PutApproval(ctx, vault.Approval{ID: id, Namespace: req.Namespace, Vault: req.Vault, Status: "pending",
		Reason: d.Reason, RequestedAt: now, ExpiresAt: now.Add(r.cfg.ApprovalTTL), Request: b})
	return id, err
}

func (r *Runner) wireApproval(a vault.Approval) (messages.Approval, error) {
	var h held
	if err := json.Unmarshal(a.Request, &h); err != nil {
		return messages.Approval{}, err
	}
	out := messages.Approval{ID: a.ID, Namespace: a.Namespace, Vault: a.Vault, Command: h.Args.Argv, Shell: h.Args.Shell,
		Reason: a.Reason, RequestedAt: a.RequestedAt.Format(time.RFC3339Nano), ExpiresAt: a.ExpiresAt.Format(time.RFC3339Nano),
		Status: a.Status, Decision: h.Decision}
	if out.Status == "pending" && r.now().After(a.ExpiresAt) {
		out.Status = "expired"
	}
	if len(a.Result) > 0 {
		var env messages.Envelope
		if err := json.Unmarshal(a.Result, &env); err != nil {
			return out, err
		}
		out.Envelope = &env
	}
	return out, nil
}

// approval loads an approval that must belong to the request's namespace:
// an operator of one namespace cannot see or decide another's.
func (r *Runner) approval(ctx context.Context, ns, id string) (vault.Approval, error) {
	a, err := r.store.Approval(ctx, id)
	if err != nil {
		return a, err
	}
	if a.Namespace != ns {
		return a, messages.Errorf(messages.CodeApprovalNotFound, "approval %q not found in namespace %s", id, ns)
	}
	return a, nil
}

func (r *Runner) approvalList(ctx context.Context, req messages.Request, _ struct{}) (any, error) {
	as, err := r.store.Approvals(ctx, req.Namespace)
	if err != nil {
		return nil, err
	}
	out := messages.ApprovalListResult{Approvals: []messages.Approval{}}
	for _, a := range as {
		w, err := r.wireApproval(a)
		if err != nil {
			return nil, err
		}
		w.Envelope = nil
		out.Approvals = append(out.Approvals, w)
	}
	return out, nil
}

func (r *Runner) approvalShow(ctx context.Context, req messages.Request, args messages.ApprovalArgs) (messages.ApprovalResult, error) {
	a, err := r.approval(ctx, req.Namespace, args.ID)
	if err != nil {
		return messages.ApprovalResult{}, err
	}
	w, err := r.wireApproval(a)
	return messages.ApprovalResult{Approval: w}, err
}

// approvalGrant runs the held command exactly once: the pending→running
// transition is atomic, so a second grant finds it no longer pending. Its
// envelope is stored with the approval and under the original request id,
// so an agent retrying that request receives it.
func (r *Runner) approvalGrant(ctx context.Context, req messages.Request, args messages.ApprovalArgs) (messages.ApprovalResult, error) {
	a, err := r.approval(ctx, req.Namespace, args.ID)
	if err != nil {
		return messages.ApprovalResult{}, err
	}
	if a.Status == "pending" && r.now().After(a.ExpiresAt) {
		r.store.TransitionApproval(ctx, a.ID, "pending", "expired", "")
		return messages.ApprovalResult{}, messages.Errorf(messages.CodeApprovalExpired, "approval %s expired at %s", a.ID, a.ExpiresAt.Format(time.RFC3339))
	}
	if a.Status == "expired" {
		return messages.ApprovalResult{}, messages.Errorf(messages.CodeApprovalExpired, "approval %s expired at %s", a.ID, a.ExpiresAt.Format(time.RFC3339))
	}
	if _, err := r.store.TransitionApproval(ctx, a.ID, "pending", "running", args.Reason); err != nil {
		if errors.Is(err, vault.ErrConflict) {
			return messages.ApprovalResult{}, messages.Errorf(messages.CodeConflict, "approval %s is %s, not pending", a.ID, a.Status)
		}
		return messages.ApprovalResult{}, err
	}
	var h held
	if err := json.Unmarshal(a.Request, &h); err != nil {
		return messages.ApprovalResult{}, err
	}
	h.Request.Actor = h.Request.Actor + " (approved by " + req.Actor + ")"
	r.store.Vault(a.Namespace, a.Vault).Record(ctx, "approval.granted", "/", map[string]any{"approval_id": a.ID, "reason": args.Reason}, vault.Meta{Actor: req.Actor, RequestID: req.RequestID, TraceID: telemetry.TraceID(ctx)})
	env, runErr := r.exec(ctx, h.Request, h.Args, true)
	if runErr != nil && env.Status == "" {
		// Refused before the command started (its working directory
		// gone, say): nothing ran, so the approval is pending again, to
		// be granted once the cause is fixed, denied, or left to expire.
		if _, err := r.store.TransitionApproval(context.WithoutCancel(ctx), a.ID, "running", "pending", ""); err != nil {
			return messages.ApprovalResult{}, errors.Join(runErr, err)
		}
		return messages.ApprovalResult{}, runErr
	}
	a.Status = "granted"
	if runErr == nil {
		a.Result, _ = json.Marshal(env)
	}
	if err := r.store.PutApproval(context.WithoutCancel(ctx), a); err != nil {
		return messages.ApprovalResult{}, err
	}
	if runErr != nil {
		return messages.ApprovalResult{}, runErr
	}
	w, err := r.wireApproval(a)
	return messages.ApprovalResult{Approval: w}, err
}

func (r *Runner) approvalDeny(ctx context.Context, req messages.Request, args messages.ApprovalArgs) (messages.ApprovalResult, error) {
	a, err := r.approval(ctx, req.Namespace, args.ID)
	if err != nil {
		return messages.ApprovalResult{}, err
	}
	a, err = r.store.TransitionApproval(ctx, a.ID, "pending", "denied", args.Reason)
	if err != nil {
		if errors.Is(err, vault.ErrConflict) {
			return messages.ApprovalResult{}, messages.Errorf(messages.CodeConflict, "approval %s is %s, not pending", a.ID, a.Status)
		}
		return messages.ApprovalResult{}, err
	}
	r.store.Vault(a.Namespace, a.Vault).Record(ctx, "approval.denied", "/", map[string]any{"approval_id": a.ID, "reason": args.Reason}, vault.Meta{Actor: req.Actor, RequestID: req.RequestID, TraceID: telemetry.TraceID(ctx)})
	w, err := r.wireApproval(a)
	return messages.ApprovalResult{Approval: w}, err
}

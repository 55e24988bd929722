package worker

import (
	"context"

	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
)

// grantCore serves calls through next; an approval.grant, which runs the
// held command on its vault here, first makes sure this worker still owns
// the vault and has its current copy, and marks the vault changed so the
// next push (at the latest, a graceful stop's) carries the command's
// effects.
type grantCore struct {
	s    *Server
	next handler.Core
}

func (g grantCore) Serve(ctx context.Context, c handler.Call) (any, error) {
	s, req := g.s, c.Request
	a, _ := c.Args.(messages.ApprovalArgs)
	if req.Op != messages.OpApprovalGrant || a.ID == "" {
		return g.next.Serve(ctx, c)
	}
	ap, err := s.store.Approval(ctx, a.ID)
	if err != nil || ap.Namespace != req.Namespace {
		return g.next.Serve(ctx, c) // the handler answers NOT_FOUND
	}
	vcall := handler.Call{Request: messages.Request{Op: messages.OpExec, Namespace: ap.Namespace, Vault: ap.Vault, RequestID: req.RequestID}}
	o, ok, err := s.owned.Get(ctx, ap.Namespace, ap.Vault)
	if err != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "owner of vault %q: %v", ap.Vault, err)
	}
	if ok && o.Worker != s.id {
		return nil, messages.Errorf(messages.CodeUnavailable,
			"vault %q moved to worker %s after the command was held on %s; run the command again", ap.Vault, o.Worker, s.id)
	}
	p, e := s.ho.before(ctx, vcall, o)
	if e != nil {
		return nil, e
	}
	// The command's effects are held by a snapshot of its vault before
	// the grant is answered (changelog.go).
	res, err := s.clog.serve(ctx, vcall, o, false, func(ctx context.Context) (any, error) { return g.next.Serve(ctx, c) })
	s.ho.after(ctx, vcall, nil, err, o, p)
	return res, err
}

package worker

import (
	"context"
	"encoding/json"

	"github.com/avfs/avfs/messages"
)

// handle serves req through the handler; an approval.grant, which runs the
// held command on its vault here, first makes sure this worker still owns
// the vault and has its current copy, and marks the vault changed so the
// next push (at the latest, a graceful stop's) carries the command's
// effects.
func (s *Server) handle(ctx context.Context, req messages.Request) messages.Reply {
	var a messages.ApprovalArgs
	if req.Op != messages.OpApprovalGrant || json.Unmarshal(req.Args, &a) != nil || a.ID == "" {
		return s.h.Handle(ctx, req)
	}
	ap, err := s.h.Store().Approval(ctx, a.ID)
	if err != nil || ap.Namespace != req.Namespace {
		return s.h.Handle(ctx, req) // the handler answers NOT_FOUND
	}
	vreq := messages.Request{Op: messages.OpExec, Namespace: ap.Namespace, Vault: ap.Vault, RequestID: req.RequestID}
	o, ok, err := s.owned.Get(ctx, ap.Namespace, ap.Vault)
	if err != nil {
		return messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeUnavailable, "owner of vault %q: %v", ap.Vault, err)}
	}
	if ok && o.Worker != s.id {
		return messages.Reply{RequestID: req.RequestID, Error: messages.Errorf(messages.CodeUnavailable,
			"vault %q moved to worker %s after the command was held on %s; run the command again", ap.Vault, o.Worker, s.id)}
	}
	p, e := s.ho.before(ctx, vreq, o)
	if e != nil {
		return messages.Reply{RequestID: req.RequestID, Error: e}
	}
	// The command's effects are held by a snapshot of its vault before
	// the grant is answered (changelog.go).
	rep, finish := s.clog.serve(ctx, vreq, o, false, func(ctx context.Context) messages.Reply { return s.h.Handle(ctx, req) })
	finish()
	s.ho.after(ctx, vreq, messages.Reply{Error: rep.Error}, o, p)
	return rep
}

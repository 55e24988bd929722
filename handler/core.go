package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// Call is one request as the core serves it: the request's envelope and
// its args, decoded once at the wire edge (Decode) into the op's args
// type (messages.VaultForkArgs for vault.fork, and so on). Request.Args
// keeps the text as it came, for layers that forward the request as it
// is; nothing in the core decodes it again.
type Call struct {
	Request messages.Request
	// Args is the op's args type, by value; nil is the type's zero value.
	Args any
}

// Core serves calls and returns typed results: the messages result type
// of the op (messages.ForkResult for vault.fork, and so on), by value,
// or an error that ToError maps to a wire code. *Handler is the core;
// the layers around it (metrics, the reply size limit, a fleet worker's
// handoff and catalog) are wrappers that hold the next Core, the way
// restic's backend wrappers hold the backend they wrap. A wrapper may
// read the call and the result, and replace either; it never encodes.
type Core interface {
	Serve(ctx context.Context, c Call) (any, error)
}

// CoreFunc adapts a function to Core.
type CoreFunc func(ctx context.Context, c Call) (any, error)

// Serve calls f.
func (f CoreFunc) Serve(ctx context.Context, c Call) (any, error) { return f(ctx, c) }

// op is one registered operation: how its args decode, and how it runs.
type op struct {
	decode func(req messages.Request) (any, error)
	serve  func(ctx context.Context, req messages.Request, args any) (any, error)
}

// bind makes an op of fn: its args decode strictly into A, refusing text
// that decoding would change (messages.ValidJSONText); its result is R
// (any for an op whose result type varies), dropped when it fails.
func bind[A, R any](fn func(ctx context.Context, req messages.Request, args A) (R, error)) op {
	return op{
		decode: func(req messages.Request) (any, error) {
			var args A
			if !messages.ValidJSONText(req.Args) {
				return nil, messages.Errorf(messages.CodeInvalidPath, "%s: args hold text that is not valid UTF-8 (or an unpaired surrogate escape): avfs refuses such names rather than fold two into one", req.Op)
			}
			if len(bytes.TrimSpace(req.Args)) > 0 && !bytes.Equal(bytes.TrimSpace(req.Args), []byte("null")) {
				dec := json.NewDecoder(bytes.NewReader(req.Args))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&args); err != nil {
					return nil, messages.Errorf(messages.CodeInvalidArgument, "%s: bad args: %v", req.Op, err)
				}
			}
			return args, nil
		},
		serve: func(ctx context.Context, req messages.Request, v any) (any, error) {
			args, ok := v.(A)
			if !ok && v != nil {
				return nil, messages.Errorf(messages.CodeInvalidArgument, "%s: args of type %T, want %T", req.Op, v, args)
			}
			if req.RequestID != "" {
				ctx = context.WithValue(ctx, argsHashKey{}, HashArgs(args))
			}
			res, err := fn(ctx, req, args)
			if err != nil {
				return nil, err
			}
			return res, nil
		},
	}
}

// check returns req's op after checking what every op needs: a known op,
// a valid namespace ("default" when empty) and, for ops on a vault, a
// valid vault name. It fills in the namespace.
func (h *Handler) check(req *messages.Request) (op, error) {
	o, ok := h.ops[req.Op]
	if !ok {
		return op{}, messages.Errorf(messages.CodeInvalidArgument, "unknown op %q", req.Op)
	}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	if err := vault.ValidVaultName(req.Namespace); err != nil {
		return op{}, err
	}
	if req.Op.NeedsVault() || req.Op == messages.OpVaultCreate || req.Op == messages.OpVaultImport {
		if req.Vault == "" {
			return op{}, messages.Errorf(messages.CodeInvalidArgument, "%s needs a vault (--vault or AVFS_VAULT)", req.Op)
		}
		if err := vault.ValidVaultName(req.Vault); err != nil {
			return op{}, err
		}
	}
	return o, nil
}

// Known says whether op is registered.
func (h *Handler) Known(op messages.Op) bool {
	_, ok := h.ops[op]
	return ok
}

// Decode turns a request off the wire into a Call: it checks the op, the
// namespace and the vault name, and decodes the args into the op's type.
// It is the one place a request's args are decoded.
func (h *Handler) Decode(req messages.Request) (Call, error) {
	o, err := h.check(&req)
	if err != nil {
		return Call{Request: req}, err
	}
	args, err := o.decode(req)
	if err != nil {
		return Call{Request: req}, err
	}
	return Call{Request: req, Args: args}, nil
}

// Serve is the core: it runs c's op and, after a change to a vault, the
// OnChange hooks. It records no metrics (Wrap adds them).
func (h *Handler) Serve(ctx context.Context, c Call) (any, error) {
	req := c.Request
	o, err := h.check(&req)
	if err != nil {
		return nil, err
	}
	res, err := o.serve(ctx, req, c.Args)
	if err != nil {
		return nil, err
	}
	// An exec tells the mounts itself; starting or killing a run changes
	// no file by itself.
	if req.Op.Mutating() && req.Op.NeedsVault() && req.Op != messages.OpExec && req.Op != messages.OpRunStart && req.Op != messages.OpRunKill {
		h.Changed(req.Op, req.Namespace, req.Vault)
	}
	return res, nil
}

// Wrap returns core inside the wrappers every process serves through:
// the request metrics (outermost: they count what the caller sees) and
// the reply size limit of a fleet (UseObjects).
func (h *Handler) Wrap(core Core) Core { return metered{h, limited{h, core}} }

// Reply is the wire edge: it decodes req once (Decode), serves the call
// through core, and encodes the result once. It never panics on bad
// input: every failure is a reply with an error code.
func (h *Handler) Reply(ctx context.Context, req messages.Request, core Core) (rep messages.Reply) {
	rep.RequestID = req.RequestID
	start := time.Now()
	c, err := h.Decode(req)
	if err != nil {
		// Refused before it reached the core (and its metrics).
		rep.Error = ToError(err)
		h.m.record(ctx, req.Op, h.Known(req.Op), rep, time.Since(start))
		return rep
	}
	res, err := core.Serve(ctx, c)
	if err != nil {
		rep.Error = ToError(err)
		return rep
	}
	b, err := encode(res)
	if err != nil {
		rep.Error = ToError(err)
		return rep
	}
	rep.Result = b
	return rep
}

// encode encodes a result; one encoded already (the size limit's) passes.
func encode(res any) (json.RawMessage, error) {
	if b, ok := res.(json.RawMessage); ok {
		return b, nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return b, nil
}

// Handle serves one request off the wire through the handler alone (no
// fleet layers): Reply through Wrap(h).
func (h *Handler) Handle(ctx context.Context, req messages.Request) messages.Reply {
	return h.Reply(ctx, req, h.Wrap(h))
}

// metered records every call's outcome and duration.
type metered struct {
	h    *Handler
	next Core
}

func (m metered) Serve(ctx context.Context, c Call) (any, error) {
	start := time.Now()
	res, err := m.next.Serve(ctx, c)
	var rep messages.Reply
	if err != nil {
		rep.Error = ToError(err)
	}
	m.h.m.record(ctx, c.Request.Op, m.h.Known(c.Request.Op), rep, time.Since(start))
	return res, err
}

// limited refuses a result larger than one reply of the fleet carries.
// It encodes the result to measure it, and hands the encoding on
// (json.RawMessage), so the edge does not encode it again: limited is
// the outermost wrapper that may look at a result.
type limited struct {
	h    *Handler
	next Core
}

func (l limited) Serve(ctx context.Context, c Call) (any, error) {
	res, err := l.next.Serve(ctx, c)
	if err != nil || l.h.maxReply <= 0 {
		return res, err
	}
	b, err := encode(res)
	if err != nil {
		return nil, err
	}
	if len(b) > l.h.maxReply {
		return nil, l.h.tooLarge("the "+string(c.Request.Op)+" result", int64(len(b)))
	}
	return b, nil
}

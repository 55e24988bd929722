package messages

import (
	"encoding/json"
	"strings"
)

// DecodeWork decodes a request delivered to a worker on a work, direct
// or peer subject (avfs.v1.<kind>.<worker>.<ns>.<vault>.<op>). The
// subject's namespace, vault and op are authoritative: a body claiming
// others is PERMISSION_DENIED, so NATS permissions on subjects are what
// confine an agent. An approval op arrives with its approval's vault in
// the subject (the dispatcher routed it there) and none in the body: the
// subject's vault fills it in. A request that can never succeed (CheckRouting) is
// INVALID_ARGUMENT; the op's args are decoded later, by its handler.
func DecodeWork(subj string, body []byte) (Request, *Error) {
	parts := strings.SplitN(subj, ".", 7)
	if len(parts) != 7 {
		var req Request
		if err := json.Unmarshal(body, &req); err != nil {
			return req, Errorf(CodeInvalidArgument, "malformed request: %v", err)
		}
		return req, Errorf(CodeInvalidArgument, "bad subject %q", subj)
	}
	vault := parts[5]
	if vault == NoVault {
		vault = ""
	}
	return Decode(parts[4], vault, Op(parts[6]), body)
}

// Decode decodes a request whose subject named namespace ns, vault (""
// for the "_" token) and op, with DecodeWork's rules: the subject is
// authoritative. The dispatcher decodes with it the requests it answers
// itself.
func Decode(ns, vault string, op Op, body []byte) (Request, *Error) {
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return req, Errorf(CodeInvalidArgument, "malformed request: %v", err)
	}
	if req.Namespace == "" {
		req.Namespace = ns
	}
	if req.Op == "" {
		req.Op = op
	}
	if req.Vault == "" {
		req.Vault = vault
	}
	if req.Namespace != ns || req.Vault != vault || req.Op != op {
		return req, Errorf(CodePermissionDenied, "request body (%s %s/%s) does not match its subject", req.Op, req.Namespace, req.Vault)
	}
	return req, CheckRouting(ns, vault, op, body)
}

package handler

import (
	"context"
	"errors"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// codes maps vault sentinels to wire codes, most specific first.
var codes = []struct {
	err  error
	code messages.Code
}{
	{vault.ErrInvalidPath, messages.CodeInvalidPath},
	{vault.ErrInvalidArgument, messages.CodeInvalidArgument},
	{vault.ErrVaultNotFound, messages.CodeVaultNotFound},
	{vault.ErrApprovalMissing, messages.CodeApprovalNotFound},
	{vault.ErrVaultExists, messages.CodeVaultExists},
	{vault.ErrCheckpointMissing, messages.CodeCheckpointNotFound},
	{vault.ErrCheckpointExists, messages.CodeCheckpointExists},
	{vault.ErrNotFound, messages.CodeNotFound},
	{vault.ErrExists, messages.CodeAlreadyExists},
	{vault.ErrNotDir, messages.CodeNotADirectory},
	{vault.ErrIsDir, messages.CodeIsADirectory},
	{vault.ErrNotEmpty, messages.CodeNotEmpty},
	{vault.ErrQuota, messages.CodeQuotaExceeded},
	{vault.ErrConflict, messages.CodeConflict},
	{vault.ErrReadOnly, messages.CodePermissionDenied},
	{vault.ErrPermission, messages.CodePermissionDenied},
	{vault.ErrTooManyLinks, messages.CodeInvalidArgument},
	{context.DeadlineExceeded, messages.CodeTimeout},
	{context.Canceled, messages.CodeUnavailable},
}

// ToError turns any error into the wire error object.
func ToError(err error) *messages.Error {
	var me *messages.Error
	if errors.As(err, &me) {
		return me
	}
	out := &messages.Error{Code: messages.CodeInternal, Message: err.Error()}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			out.Code = c.code
			break
		}
	}
	var qe *vault.QuotaError
	if errors.As(err, &qe) {
		out.Details = map[string]any{"limit": qe.Limit, "max": qe.Max, "current": qe.Current, "requested": qe.Requested}
		if qe.Mode != "" {
			out.Details["mode"] = qe.Mode // what max_size_mb counts
		}
	}
	var pe *vault.PathError
	if errors.As(err, &pe) {
		if out.Details == nil {
			out.Details = map[string]any{}
		}
		out.Details["path"] = pe.Path
	}
	return out
}

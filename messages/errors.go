package messages

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code. Codes are never reused
// for another meaning; see docs/cli.md.
type Code string

// Error codes.
const (
	CodeInvalidArgument    Code = "INVALID_ARGUMENT"
	CodeInvalidPath        Code = "INVALID_PATH"
	CodeNotFound           Code = "NOT_FOUND"
	CodeAlreadyExists      Code = "ALREADY_EXISTS"
	CodeNotADirectory      Code = "NOT_A_DIRECTORY"
	CodeIsADirectory       Code = "IS_A_DIRECTORY"
	CodeNotEmpty           Code = "NOT_EMPTY"
	CodeVaultNotFound      Code = "VAULT_NOT_FOUND"
	CodeVaultExists        Code = "VAULT_EXISTS"
	CodeCheckpointNotFound Code = "CHECKPOINT_NOT_FOUND"
	CodeCheckpointExists   Code = "CHECKPOINT_EXISTS"
	CodeQuotaExceeded      Code = "QUOTA_EXCEEDED"
	CodePolicyDenied       Code = "POLICY_DENIED"
	CodeApprovalRequired   Code = "APPROVAL_REQUIRED"
	CodeApprovalNotFound   Code = "APPROVAL_NOT_FOUND"
	CodeApprovalExpired    Code = "APPROVAL_EXPIRED"
	CodeConflict           Code = "CONFLICT"
	CodeTimeout            Code = "TIMEOUT"
	CodeUnavailable        Code = "UNAVAILABLE"
	CodePermissionDenied   Code = "PERMISSION_DENIED"
	CodeInternal           Code = "INTERNAL"
	// CodeNotImplemented marks a request the contract names but this
	// build does not serve yet.
	CodeNotImplemented Code = "NOT_IMPLEMENTED"
	// CodeMergeConflict: a merge found conflicts no strategy resolved
	// and applied nothing; details.conflicts lists them.
	CodeMergeConflict Code = "MERGE_CONFLICT"
)

// Codes lists every code, for documentation and tests.
func Codes() []Code {
	return []Code{CodeInvalidArgument, CodeInvalidPath, CodeNotFound, CodeAlreadyExists, CodeNotADirectory,
		CodeIsADirectory, CodeNotEmpty, CodeVaultNotFound, CodeVaultExists, CodeCheckpointNotFound,
		CodeCheckpointExists, CodeQuotaExceeded, CodePolicyDenied, CodeApprovalRequired, CodeApprovalNotFound,
		CodeApprovalExpired, CodeConflict, CodeTimeout, CodeUnavailable, CodePermissionDenied, CodeInternal,
		CodeNotImplemented, CodeMergeConflict}
}

// Error is the error object of every failed reply:
// {"error": {"code": ..., "message": ..., "details": {...}}}.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of an *Error anywhere in err's chain, or
// CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorDoc is the document printed or replied for a failure.
type ErrorDoc struct {
	Error *Error `json:"error"`
}

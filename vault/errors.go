package vault

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test them with errors.Is; the wire edge maps each
// to one stable error code.
var (
	ErrInvalidArgument   = errors.New("invalid argument")
	ErrInvalidPath       = errors.New("invalid path")
	ErrNotFound          = errors.New("no such file or directory")
	ErrExists            = errors.New("already exists")
	ErrNotDir            = errors.New("not a directory")
	ErrIsDir             = errors.New("is a directory")
	ErrNotEmpty          = errors.New("directory not empty")
	ErrVaultNotFound     = errors.New("vault not found")
	ErrVaultExists       = errors.New("vault already exists")
	ErrCheckpointMissing = errors.New("checkpoint not found")
	ErrCheckpointExists  = errors.New("checkpoint already exists")
	ErrQuota             = errors.New("quota exceeded")
	ErrConflict          = errors.New("conflict")
	ErrReadOnly          = errors.New("read-only")
	// ErrPermission is an operation no caller may make, as EPERM: a hard
	// link to a directory.
	ErrPermission = errors.New("operation not permitted")
	// ErrTooManyLinks is a hard link past MaxLinks names of one inode.
	ErrTooManyLinks = errors.New("too many links")
)

// PathError records the operation and vault path that failed.
type PathError struct {
	Op   string
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PathError) Unwrap() error { return e.Err }

// QuotaError says which limit a write would break. It matches ErrQuota.
type QuotaError struct {
	Limit     string // "max_size_mb", "max_files", "max_file_size_mb", or the store's "max_file_size" (bytes)
	Max       int64  // the configured limit, in the limit's own unit
	Current   int64  // usage before the write, in bytes or files
	Requested int64  // usage the write would reach, in bytes or files
	// Mode is how max_size_mb counts bytes (QuotaLogical, QuotaUnique);
	// "" for the other limits.
	Mode string
}

func (e *QuotaError) Error() string {
	if e.Mode != "" {
		return fmt.Sprintf("quota exceeded: %s is %d (%s bytes: usage %d, would be %d)", e.Limit, e.Max, e.Mode, e.Current, e.Requested)
	}
	return fmt.Sprintf("quota exceeded: %s is %d (usage %d, would be %d)", e.Limit, e.Max, e.Current, e.Requested)
}

// Is makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

func pathErr(op, p string, err error) error { return &PathError{Op: op, Path: p, Err: err} }

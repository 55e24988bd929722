package tree

import (
	"context"
	"errors"
	"strings"
	"syscall"

	"github.com/avfs/avfs/vault"
)

// Errno maps an error to the errno the kernel should see. It is the one
// place where vault errors become errno values, and it unwraps with
// errors.Is/As: go-fuse's own fs.ToErrno does not, so a wrapped vault error
// would reach the kernel as ENOSYS.
//
// A nil error is 0. Errors that match nothing known are EIO.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	var qe *vault.QuotaError
	switch {
	case errors.As(err, &qe):
		// A single file over max_file_size_mb is "file too large";
		// the vault's total size or entry count is a disk quota.
		if qe.Limit == "max_file_size_mb" || qe.Limit == "max_file_size" {
			return syscall.EFBIG
		}
		return syscall.EDQUOT
	case errors.Is(err, vault.ErrQuota):
		return syscall.EDQUOT
	case errors.Is(err, vault.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, vault.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, vault.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, vault.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, vault.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, vault.ErrInvalidPath):
		if tooLong(err) {
			return syscall.ENAMETOOLONG
		}
		return syscall.EINVAL
	case errors.Is(err, vault.ErrInvalidArgument):
		return syscall.EINVAL
	case errors.Is(err, vault.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, vault.ErrPermission):
		return syscall.EPERM
	case errors.Is(err, vault.ErrTooManyLinks):
		return syscall.EMLINK
	case errors.Is(err, vault.ErrConflict):
		// The database stayed locked past its busy timeout (or a chunk
		// went missing): the resource is busy, not the request wrong.
		return syscall.EBUSY
	case errors.Is(err, vault.ErrVaultNotFound):
		// The vault behind the mount was deleted: every handle is stale.
		return syscall.ESTALE
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return syscall.EINTR
	}
	return syscall.EIO
}

// tooLong reports whether an invalid-path error was caused by a name or
// path over Linux's limits, which POSIX reports as ENAMETOOLONG rather
// than EINVAL.
func tooLong(err error) bool {
	var pe *vault.PathError
	if !errors.As(err, &pe) {
		return false
	}
	if len(pe.Path) > vault.MaxTreePathLen {
		return true
	}
	for _, c := range strings.Split(pe.Path, "/") {
		if len(c) > vault.MaxNameLen {
			return true
		}
	}
	return false
}

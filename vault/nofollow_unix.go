//go:build unix

package vault

import "syscall"

// oNoFollow makes an open fail on a symlink instead of following it.
const oNoFollow = syscall.O_NOFOLLOW

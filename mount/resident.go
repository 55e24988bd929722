package mount

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The server's own code stays in memory.
//
// A mount's requests run code of the avfs binary that nothing else may
// have run since the process started: the FUSE handlers, the vault's
// queries, SQLite. When the page cache was dropped (memory pressure, or
// `echo 3 > /proc/sys/vm/drop_caches` before a cold read), each of those
// code paths first waits for its pages to be read back from disk, one
// fault at a time, while the program reading through the mount waits for
// the request. The binary's code and read-only data are 38 MiB; a cold
// read of 2,000 files through a fresh mount spent about a fifth of its
// time paging them in (`cat bin/avfs > /dev/null` first made it 660 →
// 520 ms), and twice that when the cache was dropped after the mount
// started.
//
// So the first mount of a process locks the executable's read-only
// mappings in memory (mlock(2), read in one go, in the background), and
// where the process may not lock that much (RLIMIT_MEMLOCK, no
// CAP_IPC_LOCK) it asks the kernel to read them ahead instead
// (MADV_WILLNEED), which a later drop of the cache undoes. The locked
// pages are the page cache's pages of the file, shared by every process
// running the same binary; nothing is copied.
var residentOnce sync.Once

// keepCodeResident starts the lock of the executable's code, once per
// process.
func keepCodeResident(log *slog.Logger) {
	residentOnce.Do(func() {
		go func() {
			locked, err := lockCode()
			switch {
			case err != nil:
				log.Debug("keep code resident", keyErr, err)
			case !locked:
				log.Debug("code read ahead, not locked (RLIMIT_MEMLOCK)")
			}
		}()
	})
}

// lockCode locks the executable's read-only mappings (code, read-only
// data), or advises the kernel to read them when it may not lock them;
// locked reports which.
func lockCode() (locked bool, err error) {
	ranges, err := codeRanges()
	if err != nil {
		return false, err
	}
	locked = true
	for _, r := range ranges {
		if _, _, errno := syscall.Syscall(syscall.SYS_MLOCK, r[0], r[1]-r[0], 0); errno != 0 {
			locked = false
			if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_WILLNEED); errno != 0 {
				return false, fmt.Errorf("madvise %#x-%#x: %w", r[0], r[1], errno)
			}
		}
	}
	return locked, nil
}

// codeRanges are the address ranges [start, end) where the executable
// is mapped without write access, from /proc/self/maps.
func codeRanges() ([][2]uintptr, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &st); err != nil {
		return nil, fmt.Errorf("stat executable: %w", err)
	}
	dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1][1] == 'w' {
			continue
		}
		if ino, err := strconv.ParseUint(fields[4], 10, 64); err != nil || ino != st.Ino || fields[3] != dev {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("/proc/self/maps: bad range %q", fields[0])
		}
		out = append(out, [2]uintptr{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/proc/self/maps: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/self/maps: executable (inode %d) not mapped", st.Ino)
	}
	return out, nil
}

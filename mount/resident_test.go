package mount

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/vault"
)

// Serving a mount keeps the process's own code in memory: the pages the
// kernel's requests run are not read back from disk after the page cache
// was dropped.
func TestServingKeepsTheCodeResident(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root (CAP_IPC_LOCK) to lock the code")
	}
	ranges, err := codeRanges()
	if err != nil {
		t.Fatal(err)
	}
	var code int64
	for _, r := range ranges {
		code += int64(r[1] - r[0])
	}
	mountVault(t, testVault(t, vault.Quota{}), Options{})
	poll.Until(t, 10*time.Second, "the executable's code locked", func() (bool, error) {
		locked, err := lockedBytes()
		if err != nil {
			return false, err
		}
		if locked < code {
			return false, fmt.Errorf("%d bytes locked, the code is %d", locked, code)
		}
		return true, nil
	})
	// Dropping the page cache leaves every page of it in memory.
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		vec := make([]byte, (int(r[1]-r[0])+pageSize-1)/pageSize)
		if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, r[0], r[1]-r[0], uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatalf("mincore %#x-%#x: %v", r[0], r[1], errno)
		}
		for i, b := range vec {
			if b&1 == 0 {
				t.Fatalf("after a drop of the page cache, page %d of %#x-%#x is not in memory", i, r[0], r[1])
			}
		}
	}
}

// lockedBytes is this process's VmLck.
func lockedBytes() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmLck:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmLck in /proc/self/status: %v", sc.Err())
}

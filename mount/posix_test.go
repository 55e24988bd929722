package mount

import (
	"os"
	osexec "os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/avfs/avfs/vault"
	"github.com/hanwen/go-fuse/v2/posixtest"
)

// unsupported lists the posixtest cases that fail on purpose, with why.
// TestPosix runs each in a child process and requires it to fail, so an
// entry that starts passing must be removed.
var unsupported = map[string]string{
	"FcntlFlockLocksFile": "expects a second F_SETLK by the same process to conflict, which POSIX " +
		"record locks never do (ext4 fails it too; go-fuse's own TestAll skips it); locks are the kernel's",
}

// posixChildEnv names the one case TestPosixChild runs.
const posixChildEnv = "AVFS_MOUNT_POSIXTEST_CASE"

// TestPosix runs go-fuse's conformance suite, each case on a fresh mount.
func TestPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for name := range unsupported {
		if posixtest.All[name] == nil {
			t.Errorf("unsupported lists %q, which posixtest no longer has", name)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := unsupported[name]; ok {
				expectChildFailure(t, name, why)
				return
			}
			m := mountVault(t, testVault(t, vault.Quota{}), Options{})
			posixtest.All[name](t, m.Dir())
		})
	}
}

// expectChildFailure runs one case in a child test process, where its
// failure cannot fail this test, and requires that it fails.
func expectChildFailure(t *testing.T, name, why string) {
	cmd := osexec.Command(os.Args[0], "-test.run=^TestPosixChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), posixChildEnv+"="+name)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL: TestPosixChild") {
		t.Fatalf("%s is listed as unsupported (%s) but did not fail; remove it from the list.\n%v\n%s", name, why, err, out)
	}
	t.Logf("fails as expected: %s", why)
}

// TestPosixChild is TestPosix's helper: it runs the case named in the
// environment, and nothing when started by hand.
func TestPosixChild(t *testing.T) {
	name := os.Getenv(posixChildEnv)
	if name == "" {
		t.Skip("runs one posixtest case for TestPosix in a child process")
	}
	m := mountVault(t, testVault(t, vault.Quota{}), Options{})
	posixtest.All[name](t, m.Dir())
}

package mount

import (
	"os"
	osexec "os/exec"
	"strings"
	"testing"

	"github.com/avfs/avfs/vault"
	"golang.org/x/sys/unix"
)

const (
	renameNoReplace = unix.RENAME_NOREPLACE
	renameExchange  = unix.RENAME_EXCHANGE
)

func renameat2(from, to string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, flags)
}

// run runs a command with its working directory in the mount. The
// binaries live outside the mount, and the kernel checks permissions
// itself, so the fork cannot wait on a request this process serves.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := osexec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestShell(t *testing.T) {
	m := mountVault(t, testVault(t, vault.Quota{}), Options{})
	got := run(t, m.Dir(), []string{"PATH=/usr/bin:/bin"}, "sh", "-c", "echo hi > f; cat f")
	if got != "hi\n" {
		t.Fatalf("sh: got %q, want %q", got, "hi\n")
	}
}

func TestGit(t *testing.T) {
	v := testVault(t, vault.Quota{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	if err := os.MkdirAll(dir+"/src/nested", 0o755); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{"README", "src/main.go", "src/nested/x.txt", "src/nested/y.txt"} {
		writeFile(t, dir+"/"+p, strings.Repeat("line\n", i+1))
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}
	git := func(args ...string) string {
		t.Helper()
		return run(t, dir, env, "git", append([]string{"-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "first")
	if got := git("status", "--porcelain"); got != "" {
		t.Fatalf("git status after commit: got %q, want clean", got)
	}
	writeFile(t, dir+"/src/main.go", "changed\n")
	if got := git("status", "--porcelain"); got != " M src/main.go\n" {
		t.Fatalf("git status after a change: got %q", got)
	}
	git("commit", "-q", "-am", "second")
	if got := git("log", "--format=%s"); got != "second\nfirst\n" {
		t.Fatalf("git log: got %q", got)
	}
	if got := git("fsck", "--no-progress"); got != "" {
		t.Logf("git fsck: %s", got)
	}
	// Everything git wrote is in the vault.
	if _, err := v.Stat(t.Context(), "/.git/HEAD"); err != nil {
		t.Fatalf("vault has no .git/HEAD: %v", err)
	}
}

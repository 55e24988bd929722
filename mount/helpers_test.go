package mount

import (
	"bytes"
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/vault"
)

// testVault creates a vault with quota q in a fresh store.
func testVault(t testing.TB, q vault.Quota) *vault.Vault {
	t.Helper()
	v, _ := storeVault(t, q, vault.Options{})
	return v
}

// storeVault creates vault default/v with quota q in a fresh store opened
// with o, and returns it with the store's file.
func storeVault(t testing.TB, q vault.Quota, o vault.Options) (*vault.Vault, string) {
	t.Helper()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "store.db")
	s, err := vault.Open(ctx, file, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create(ctx, "default", "v", q, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	return s.Vault("default", "v"), file
}

// mountVault mounts v on a fresh directory and unmounts it when the test
// ends. Without /dev/fuse it fails: a skipped mount test would hide that
// nothing was tested.
func mountVault(t testing.TB, v *vault.Vault, o Options) *Mount {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("mount tests need /dev/fuse and root: %v", err)
	}
	if os.Getenv("AVFS_TEST_PASSTHROUGH") != "" && o.Passthrough == nil {
		// The whole suite with passthrough on: what the option breaks.
		b, err := tree.OpenBacking(t.TempDir(), 0)
		if err != nil {
			t.Fatal(err)
		}
		o.Passthrough = b
	}
	m, err := New(context.Background(), v, t.TempDir(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// syncMount commits what the mount still buffers or queues, so the vault
// API sees it.
func syncMount(t testing.TB, m *Mount) {
	t.Helper()
	if err := m.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// vaultFile reads p through the vault API.
func vaultFile(t testing.TB, v *vault.Vault, p string) string {
	t.Helper()
	data, _, err := v.ReadFile(context.Background(), p)
	if err != nil {
		t.Fatalf("vault ReadFile %s: %v", p, err)
	}
	return string(data)
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	return string(data)
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatalf("WriteFile %s: %v", p, err)
	}
}

// wantErrno fails unless err carries one of the errnos.
func wantErrno(t testing.TB, what string, err error, want ...syscall.Errno) {
	t.Helper()
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Fatalf("%s: got error %v, want %v", what, err, want)
}

// checkFor polls fn until it returns nil or the deadline passes.
func checkFor(t testing.TB, total, every time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", total, err)
		}
		time.Sleep(every)
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func equalBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes, want %d (first difference at %d)", what, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// commandIn is osexec.Command(name, args...) with the working directory
// dir, in a mount this process serves. It starts through `env -C`, as
// exec.Spec.EnterDir does: os/exec's vfork'd child execs env, off the
// mount, and env, a process of its own, walks the mount. A vfork'd
// child of this process that walks the mount while the runtime stops the
// world (a garbage collection) deadlocks it: the child waits on the
// mount's server, the stop on the thread the vfork holds (decisions §43).
// A name without a slash is looked up along this process's PATH, as
// osexec.Command does.
func commandIn(dir, name string, args ...string) *osexec.Cmd {
	if !strings.Contains(name, "/") {
		if p, err := osexec.LookPath(name); err == nil {
			name = p
		}
	}
	return osexec.Command("/usr/bin/env", append([]string{"-C", dir, "--", name}, args...)...)
}

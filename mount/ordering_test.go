package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/avfs/avfs/vault"
)

// A mount that does not queue closes (avfs mount without --queue-closes)
// has every change it answered in the vault when the call returns: the
// vault API, read by another process right after rm, chmod, mkdir or mv,
// sees it, and a checkpoint restore right after an rm is not undone by
// the rm landing later.
func TestPlainMountCommitsBeforeItAnswers(t *testing.T) {
	ctx := context.Background()
	v := testVault(t, vault.Quota{})
	for _, p := range []string{"/f1", "/f2", "/f3", "/f4"} {
		if _, err := v.WriteFile(ctx, p, []byte("x"), vault.WriteOptions{}, vault.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.SaveCheckpoint(ctx, "c", "", false, vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	m := mountVault(t, v, Options{})
	at := func(p string) string { return filepath.Join(m.Dir(), p) }

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(at("f1")))
	if _, err := v.Stat(ctx, "/f1"); !errors.Is(err, vault.ErrNotFound) {
		t.Fatalf("stat /f1 through the vault right after rm returned: %v, want not found", err)
	}
	must(os.Chmod(at("f2"), 0o600))
	if e, err := v.Stat(ctx, "/f2"); err != nil || e.Mode.Perm() != 0o600 {
		t.Fatalf("/f2 through the vault right after chmod 600: %v %v", e.Mode, err)
	}
	must(os.Mkdir(at("d"), 0o755))
	if e, err := v.Stat(ctx, "/d"); err != nil || e.Kind != vault.KindDir {
		t.Fatalf("/d through the vault right after mkdir: %+v %v", e, err)
	}
	must(os.Rename(at("f3"), at("d/g")))
	if _, err := v.Stat(ctx, "/d/g"); err != nil {
		t.Fatalf("/d/g through the vault right after mv: %v", err)
	}

	// rm, then a restore from outside the mount: the restore wins.
	must(os.Remove(at("f4")))
	if _, err := v.RestoreCheckpoint(ctx, "c", vault.Meta{}); err != nil {
		t.Fatal(err)
	}
	syncMount(t, m) // what the mount still held would land now, after the restore
	for _, p := range []string{"/f1", "/f2", "/f3", "/f4"} {
		if _, err := v.Stat(ctx, p); err != nil {
			t.Errorf("%s after the restore: %v (a change the mount answered before it landed after it)", p, err)
		}
	}
}

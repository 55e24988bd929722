package vault

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// posixAttrs is what the POSIX metadata of an entry looks like to a
// user: mode bits, owner, device number and link count.
type posixAttrs struct {
	kind     Kind
	mode     uint32
	uid, gid int64
	rdev     uint64
	nlink    uint32
}

func attrsOf(t testing.TB, v *Vault, p string) posixAttrs {
	t.Helper()
	e, err := v.Stat(context.Background(), p)
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return posixAttrs{e.Kind, ModeBits(e.Mode), e.Uid, e.Gid, e.Rdev, e.Nlink}
}

// buildPosixTree makes, as user 1000:1000, a setgid directory of group
// 50 holding a file and a subdirectory, a fifo, a character device and
// a setuid executable.
func buildPosixTree(t testing.TB, v *Vault) {
	t.Helper()
	ctx := context.Background()
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		return tx.AsOwner(1000, 1000, func() error {
			if err := tx.Mkdir("/shared", 0o775, false); err != nil {
				return err
			}
			g := int64(50)
			sg := fs.ModeSetgid | 0o775
			if _, err := tx.SetAttrs("/shared", Attrs{Gid: &g, Mode: &sg}); err != nil {
				return err
			}
			if _, err := tx.WriteFile("/shared/f", []byte("x"), WriteOptions{Mode: 0o640}); err != nil {
				return err
			}
			if err := tx.Mkdir("/shared/sub", 0o755, false); err != nil {
				return err
			}
			if err := tx.Mknod("/fifo", KindFifo, 0o600, 0); err != nil {
				return err
			}
			if err := tx.Mknod("/null", KindCharDev, 0o666, 0x103); err != nil {
				return err
			}
			_, err := tx.WriteFile("/suid", []byte("#!"), WriteOptions{Mode: fs.ModeSetuid | fs.ModeSetgid | 0o755})
			return err
		})
	}))
}

var posixTreeWant = map[string]posixAttrs{
	"/":           {KindDir, 0o755, NoOwner, NoOwner, 0, 3},
	"/shared":     {KindDir, 0o2775, 1000, 50, 0, 3},
	"/shared/f":   {KindFile, 0o640, 1000, 50, 0, 1},   // the directory's group
	"/shared/sub": {KindDir, 0o2755, 1000, 50, 0, 2},   // setgid inherited
	"/fifo":       {KindFifo, 0o600, 1000, 1000, 0, 1}, // no device number
	"/null":       {KindCharDev, 0o666, 1000, 1000, 0x103, 1},
	"/suid":       {KindFile, 0o6755, 1000, 1000, 0, 1},
}

func checkPosixTree(t testing.TB, v *Vault, want map[string]posixAttrs) {
	t.Helper()
	for p, w := range want {
		if got := attrsOf(t, v, p); got != w {
			t.Errorf("%s/%s: got %+v, want %+v", v.Name(), p, got, w)
		}
	}
}

func TestPosixMetadata(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	buildPosixTree(t, v)
	checkPosixTree(t, v, posixTreeWant)

	// The listing shows the same as Stat.
	list, err := v.ReadDir(ctx, "/shared")
	must(t, err)
	for _, e := range list {
		w := posixTreeWant[e.Path]
		if got := (posixAttrs{e.Kind, ModeBits(e.Mode), e.Uid, e.Gid, e.Rdev, e.Nlink}); got != w {
			t.Errorf("readdir %s: got %+v, want %+v", e.Path, got, w)
		}
	}

	// A checkpoint and a fork keep it all; changes after them do not
	// reach them.
	_, err = v.SaveCheckpoint(ctx, "c1", "", false, Meta{})
	must(t, err)
	_, err = s.Fork(ctx, "default", "a", "b", "", Meta{})
	must(t, err)
	uid := int64(0)
	must(t, v.Update(ctx, Meta{}, func(tx *Tx) error {
		_, err := tx.SetAttrs("/suid", Attrs{Uid: &uid})
		return err
	}))
	must(t, v.Remove(ctx, "/shared/sub", RemoveOptions{}, Meta{}))
	changed := map[string]posixAttrs{
		"/suid":   {KindFile, 0o0755, 0, 1000, 0, 1}, // chown clears setuid, and setgid with group execute
		"/shared": {KindDir, 0o2775, 1000, 50, 0, 2}, // one subdirectory fewer
	}
	checkPosixTree(t, v, changed)
	checkPosixTree(t, s.Vault("default", "b"), posixTreeWant)

	// The change summary sees the owner change.
	ch, err := v.Diff(ctx, "c1", "")
	must(t, err)
	if len(ch.Modified) != 1 || ch.Modified[0].Path != "/suid" || len(ch.Deleted) != 1 {
		t.Errorf("diff after chown and rmdir: got %+v, want /suid modified and /shared/sub deleted", ch)
	}

	_, err = v.RestoreCheckpoint(ctx, "c1", Meta{})
	must(t, err)
	checkPosixTree(t, v, posixTreeWant)

	// Export and import carry it.
	file := filepath.Join(t.TempDir(), "a.avfs")
	_, err = s.Export(ctx, "default", "a", file)
	must(t, err)
	_, err = s.Import(ctx, file, "default", "c", Meta{})
	must(t, err)
	checkPosixTree(t, s.Vault("default", "c"), posixTreeWant)
}

func TestDirLinkCounts(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	must(t, v.Mkdir(ctx, "/a/b/c", 0, true, Meta{}))
	must(t, v.Mkdir(ctx, "/a/d", 0, false, Meta{}))
	mustWrite(t, v, "/a/file", []byte("x"))
	nlink := func(p string) uint32 { return attrsOf(t, v, p).nlink }
	if got := [3]uint32{nlink("/"), nlink("/a"), nlink("/a/b/c")}; got != [3]uint32{3, 4, 2} {
		t.Fatalf("link counts of /, /a, /a/b/c: got %v, want [3 4 2]", got)
	}
	// A directory moved to another parent moves its link.
	must(t, v.Rename(ctx, "/a/d", "/d", RenameOptions{}, Meta{}))
	// Replacing an empty directory by a rename drops the victim's.
	must(t, v.Mkdir(ctx, "/e", 0, false, Meta{}))
	must(t, v.Rename(ctx, "/d", "/e", RenameOptions{}, Meta{}))
	must(t, v.Copy(ctx, "/a", "/a2", true, Meta{}))
	if got := [4]uint32{nlink("/"), nlink("/a"), nlink("/a2"), nlink("/a2/b")}; got != [4]uint32{5, 3, 3, 3} {
		t.Fatalf("after rename and copy, link counts of /, /a, /a2, /a2/b: got %v, want [5 3 3 3]", got)
	}
	must(t, v.Remove(ctx, "/a", RemoveOptions{Recursive: true}, Meta{}))
	if got := nlink("/"); got != 4 {
		t.Fatalf("after rm -r /a, links of /: got %d, want 4", got)
	}
}

// TestDeepTree: Linux limits the path of one call, not the depth of a
// tree; a vault path may be longer than 4,096 bytes.
func TestDeepTree(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	v := newVault(t, s, "a", Quota{})
	p := strings.Repeat("/"+strings.Repeat("d", 200), 30) // 6,030 bytes
	must(t, v.Mkdir(ctx, p, 0, true, Meta{}))
	mustWrite(t, v, p+"/f", []byte("deep"))
	mustRead(t, v, p+"/f", []byte("deep"))
}

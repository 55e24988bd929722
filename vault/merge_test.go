package vault

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/avfs/avfs/internal/textdiff"
)

// mergeSetup makes vault "base" with files, forks it as "fork", then
// runs ours on base and theirs on the fork.
func mergeSetup(t *testing.T, files map[string]string, ours, theirs func(tx *Tx) error) (*Store, *Vault, *Vault) {
	t.Helper()
	ctx := context.Background()
	s := openTestStore(t)
	if _, err := s.Create(ctx, "default", "base", Quota{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	base, fork := s.Vault("default", "base"), s.Vault("default", "fork")
	if err := base.Update(ctx, Meta{}, func(tx *Tx) error {
		for p, c := range files {
			if _, err := tx.WriteFile(p, []byte(c), WriteOptions{Parents: true}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fork(ctx, "default", "base", "fork", "", Meta{}); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		v  *Vault
		fn func(tx *Tx) error
	}{{base, ours}, {fork, theirs}} {
		if side.fn == nil {
			continue
		}
		if err := side.v.Update(ctx, Meta{}, side.fn); err != nil {
			t.Fatal(err)
		}
	}
	return s, base, fork
}

// walkTree calls fn for every entry of v, parents first, in one read
// transaction.
func walkTree(v *Vault, fn func(tx *Tx, e Entry) error) error {
	return v.View(context.Background(), func(tx *Tx) error {
		var walk func(p string) error
		walk = func(p string) error {
			es, err := tx.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range es {
				if err := fn(tx, e); err != nil {
					return err
				}
				if e.Kind == KindDir {
					if err := walk(e.Path); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return walk("/")
	})
}

// files reads every entry of v: path → content and mode ("->target" for
// a symlink; a directory's path ends in '/', with its mode).
func files(t testing.TB, v *Vault) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := walkTree(v, func(tx *Tx, e Entry) error {
		switch e.Kind {
		case KindDir:
			out[e.Path+"/"] = fmt.Sprintf("%04o", ModeBits(e.Mode))
		case KindSymlink:
			out[e.Path] = "->" + e.Target
		default:
			data, _, err := tx.ReadFile(e.Path)
			if err != nil {
				return err
			}
			out[e.Path] = fmt.Sprintf("%s %04o", data, ModeBits(e.Mode))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func put(p, c string) func(tx *Tx) error {
	return func(tx *Tx) error {
		_, err := tx.WriteFile(p, []byte(c), WriteOptions{Parents: true})
		return err
	}
}

func steps(fns ...func(tx *Tx) error) func(tx *Tx) error {
	return func(tx *Tx) error {
		for _, f := range fns {
			if err := f(tx); err != nil {
				return err
			}
		}
		return nil
	}
}

func rm(p string) func(tx *Tx) error {
	return func(tx *Tx) error { return tx.Remove(p, RemoveOptions{Recursive: true}) }
}

func chmod(p string, m fs.FileMode) func(tx *Tx) error {
	return func(tx *Tx) error { _, err := tx.SetAttr(p, &m, nil); return err }
}

const text = "1\n2\n3\n4\n5\n6\n7\n8\n9\n"

// TestMergeCases runs Merge over each kind of change on each side and
// checks the resulting tree, the conflicts, and that a merge with
// conflicts changes nothing.
func TestMergeCases(t *testing.T) {
	start := map[string]string{"/a": "a", "/b": "b", "/t.txt": text, "/bin": "\x00\x01", "/d/x": "x", "/d/y": "y"}
	type want struct {
		files     map[string]string // entries expected to differ from the start (value "" = absent)
		conflicts []string          // "path kind"
	}
	cases := []struct {
		name         string
		ours, theirs func(tx *Tx) error
		strategy     string
		want         want
	}{
		{name: "one side", ours: put("/a", "A"), theirs: steps(put("/b", "B"), put("/new/n", "n"), rm("/d/x")),
			want: want{files: map[string]string{"/a": "A 0644", "/b": "B 0644", "/new/": "0755", "/new/n": "n 0644", "/d/x": ""}}},
		{name: "same change both", ours: put("/a", "Z"), theirs: put("/a", "Z"), want: want{files: map[string]string{"/a": "Z 0644"}}},
		{name: "delete both", ours: rm("/a"), theirs: rm("/a"), want: want{files: map[string]string{"/a": ""}}},
		{name: "text merged", ours: put("/t.txt", "one\n2\n3\n4\n5\n6\n7\n8\n9\n"), theirs: put("/t.txt", "1\n2\n3\n4\n5\n6\n7\n8\nnine\n"),
			want: want{files: map[string]string{"/t.txt": "one\n2\n3\n4\n5\n6\n7\n8\nnine\n 0644"}}},
		{name: "text overlap", ours: put("/t.txt", "1\n2\nours\n4\n5\n6\n7\n8\n9\n"), theirs: put("/t.txt", "1\n2\ntheirs\n4\n5\n6\n7\n8\n9\n"),
			want: want{conflicts: []string{"/t.txt content"}}},
		{name: "text overlap theirs", ours: put("/t.txt", "1\n2\nours\n4\n5\n6\n7\n8\nO\n"), theirs: put("/t.txt", "T\n2\ntheirs\n4\n5\n6\n7\n8\n9\n"), strategy: StrategyTheirs,
			want: want{files: map[string]string{"/t.txt": "T\n2\ntheirs\n4\n5\n6\n7\n8\nO\n 0644"}, conflicts: []string{"/t.txt content"}}},
		{name: "binary", ours: put("/bin", "\x00o"), theirs: put("/bin", "\x00t"), want: want{conflicts: []string{"/bin binary"}}},
		{name: "binary theirs", ours: put("/bin", "\x00o"), theirs: put("/bin", "\x00t"), strategy: StrategyTheirs,
			want: want{files: map[string]string{"/bin": "\x00t 0644"}, conflicts: []string{"/bin binary"}}},
		{name: "add/add", ours: put("/n", "o\n"), theirs: put("/n", "t\n"), want: want{conflicts: []string{"/n add/add"}}},
		{name: "add/add same", ours: put("/n", "s"), theirs: put("/n", "s"), want: want{files: map[string]string{"/n": "s 0644"}}},
		{name: "modify/delete", ours: put("/a", "A"), theirs: rm("/a"), want: want{conflicts: []string{"/a modify/delete"}}},
		{name: "modify/delete theirs", ours: put("/a", "A"), theirs: rm("/a"), strategy: StrategyTheirs,
			want: want{files: map[string]string{"/a": ""}, conflicts: []string{"/a modify/delete"}}},
		{name: "delete/modify", ours: rm("/a"), theirs: put("/a", "A"), want: want{conflicts: []string{"/a delete/modify"}}},
		{name: "delete/modify ours", ours: rm("/a"), theirs: put("/a", "A"), strategy: StrategyOurs,
			want: want{files: map[string]string{"/a": ""}, conflicts: []string{"/a delete/modify"}}},
		{name: "dir deleted, file changed", ours: rm("/d"), theirs: put("/d/x", "X"), want: want{conflicts: []string{"/d/x delete/modify"}}},
		{name: "dir deleted, file changed theirs", ours: rm("/d"), theirs: put("/d/x", "X"), strategy: StrategyTheirs,
			want: want{files: map[string]string{"/d/": "0755", "/d/x": "X 0644", "/d/y": ""}, conflicts: []string{"/d/x delete/modify"}}},
		{name: "dir deleted theirs, untouched ours", theirs: rm("/d"), want: want{files: map[string]string{"/d/": "", "/d/x": "", "/d/y": ""}}},
		{name: "type", ours: steps(rm("/a"), func(tx *Tx) error { return tx.Mkdir("/a", 0o755, false) }), theirs: put("/a", "A"),
			want: want{conflicts: []string{"/a type"}}},
		{name: "type theirs", ours: steps(rm("/a"), func(tx *Tx) error { return tx.Mkdir("/a", 0o700, false) }), theirs: steps(rm("/a"), func(tx *Tx) error { return tx.Symlink("/b", "/a") }),
			strategy: StrategyTheirs, want: want{files: map[string]string{"/a": "->/b", "/a/": ""}, conflicts: []string{"/a type"}}},
		{name: "symlinks", ours: func(tx *Tx) error { return tx.Symlink("o", "/l") }, theirs: func(tx *Tx) error { return tx.Symlink("t", "/l") },
			want: want{conflicts: []string{"/l add/add"}}},
		{name: "mode one side", ours: put("/a", "A"), theirs: chmod("/a", 0o755), want: want{files: map[string]string{"/a": "A 0755"}}},
		{name: "mode both", ours: chmod("/a", 0o600), theirs: chmod("/a", 0o755), want: want{conflicts: []string{"/a mode"}}},
		{name: "mode both theirs", ours: chmod("/a", 0o600), theirs: chmod("/a", 0o755), strategy: StrategyTheirs,
			want: want{files: map[string]string{"/a": "a 0755"}, conflicts: []string{"/a mode"}}},
		{name: "dir mode", theirs: chmod("/d", 0o700), want: want{files: map[string]string{"/d/": "0700"}}},
		{name: "nothing", want: want{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			_, base, fork := mergeSetup(t, start, c.ours, c.theirs)
			before, forkBefore := files(t, base), files(t, fork)
			res, err := base.Merge(ctx, "fork", MergeOptions{Strategy: c.strategy, Text: textdiff.MergeText}, Meta{})
			var got []string
			for _, cf := range res.Conflicts {
				got = append(got, cf.Path+" "+cf.Kind)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want.conflicts) {
				t.Fatalf("conflicts %v, want %v (%+v)", got, c.want.conflicts, res.Conflicts)
			}
			after := files(t, base)
			if c.strategy == "" && len(c.want.conflicts) > 0 {
				var ce *MergeConflictError
				if !errors.As(err, &ce) || !errors.Is(err, ErrMergeConflict) || res.Applied {
					t.Fatalf("merge: %v (applied %v), want a MergeConflictError", err, res.Applied)
				}
				if fmt.Sprint(after) != fmt.Sprint(before) {
					t.Fatalf("a merge with conflicts changed the target:\n%v\nwas\n%v", after, before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantFiles := map[string]string{}
			for p, v := range before {
				wantFiles[p] = v
			}
			for p, v := range c.want.files {
				if v == "" {
					delete(wantFiles, p)
				} else {
					wantFiles[p] = v
				}
			}
			if fmt.Sprint(after) != fmt.Sprint(wantFiles) {
				t.Fatalf("after merge\n%q\nwant\n%q", after, wantFiles)
			}
			if fmt.Sprint(files(t, fork)) != fmt.Sprint(forkBefore) {
				t.Fatal("the merge changed the fork")
			}
			changed := fmt.Sprint(after) != fmt.Sprint(before)
			if res.Applied != changed || (res.Checkpoint != "") != changed || res.Changes.Empty() == changed {
				t.Fatalf("applied %v, checkpoint %q, changes %+v; the tree changed: %v", res.Applied, res.Checkpoint, res.Changes, changed)
			}
			checkInodes(t, base)
			// Merging again finds nothing left to do.
			again, err := base.Merge(ctx, "fork", MergeOptions{Strategy: c.strategy, Text: textdiff.MergeText}, Meta{})
			if err != nil || again.Applied || again.Checkpoint != "" || len(again.Merged) != 0 {
				t.Fatalf("the same merge again: %+v, %v", again, err)
			}
			if got := files(t, base); fmt.Sprint(got) != fmt.Sprint(after) {
				t.Fatalf("the same merge again changed the target: %v", got)
			}
			if !changed {
				return
			}
			// The checkpoint taken before the merge undoes it.
			if _, err := base.RestoreCheckpoint(ctx, res.Checkpoint, Meta{}); err != nil {
				t.Fatal(err)
			}
			if got := files(t, base); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("restore of %s: %v, want %v", res.Checkpoint, got, before)
			}
		})
	}
}

// checkInodes fails if two entries of v share an inode number: the fork
// numbers its new entries from the counter the target numbers its own.
func checkInodes(t testing.TB, v *Vault) {
	t.Helper()
	if err := inodeClash(v); err != nil {
		t.Fatal(err)
	}
}

// inodeClash returns an error naming two entries of v with one inode
// number, if any.
func inodeClash(v *Vault) error {
	seen := map[uint64]string{}
	return walkTree(v, func(_ *Tx, e Entry) error {
		if q, ok := seen[e.Ino]; ok {
			return fmt.Errorf("inode %d: %s and %s", e.Ino, q, e.Path)
		}
		seen[e.Ino] = e.Path
		return nil
	})
}

func TestMergeOptions(t *testing.T) {
	ctx := context.Background()
	start := map[string]string{"/src/a.go": "a", "/src/b.txt": "b", "/docs/c.go": "c"}
	_, base, _ := mergeSetup(t, start, put("/docs/d.txt", "d"), steps(put("/src/a.go", "A"), put("/src/b.txt", "B"), put("/docs/c.go", "C"), put("/new/n.go", "N")))
	before := files(t, base)

	// A dry run reports the changes and applies none.
	res, err := base.Merge(ctx, "fork", MergeOptions{DryRun: true}, Meta{})
	if err != nil || res.Applied || res.Checkpoint != "" || len(res.Changes.Modified) != 3 || len(res.Changes.Added) != 2 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if got := files(t, base); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("a dry run changed the target: %v", got)
	}
	cps, _ := base.Checkpoints(ctx)
	if len(cps) != 0 {
		t.Fatalf("a dry run took a checkpoint: %v", cps)
	}

	// Paths: only /src/*.go and anything named *.go below new/.
	res, err = base.Merge(ctx, "fork", MergeOptions{Paths: []string{"/src/*.go", "new/*.go"}, Checkpoint: "pre"}, Meta{})
	if err != nil || res.Checkpoint != "pre" {
		t.Fatalf("merge with paths: %+v, %v", res, err)
	}
	got := files(t, base)
	if got["/src/a.go"] != "A 0644" || got["/src/b.txt"] != "b 0644" || got["/docs/c.go"] != "c 0644" || got["/new/n.go"] != "N 0644" {
		t.Fatalf("merge with paths: %v", got)
	}
	// "*.go" matches names at any depth.
	if _, err := base.Merge(ctx, "fork", MergeOptions{Paths: []string{"*.go"}}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if got := files(t, base); got["/docs/c.go"] != "C 0644" || got["/src/b.txt"] != "b 0644" {
		t.Fatalf("merge of *.go: %v", got)
	}

	// Bad input changes nothing.
	for _, o := range []MergeOptions{{Strategy: "mine"}, {Paths: []string{"["}}, {Checkpoint: ".x"}} {
		if _, err := base.Merge(ctx, "fork", o, Meta{}); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("merge %+v: %v, want invalid argument", o, err)
		}
	}
	if _, err := base.Merge(ctx, "base", MergeOptions{}, Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("merge into itself: %v, want invalid argument", err)
	}
	if _, err := base.Merge(ctx, "nope", MergeOptions{}, Meta{}); !errors.Is(err, ErrVaultNotFound) {
		t.Fatalf("merge of a missing vault: %v, want vault not found", err)
	}
	// A vault that was not forked has no fork point.
	s := openTestStore(t)
	s.Create(ctx, "default", "x", Quota{}, Meta{})
	s.Create(ctx, "default", "y", Quota{}, Meta{})
	if _, err := s.Vault("default", "x").Merge(ctx, "y", MergeOptions{}, Meta{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("merge of a vault without a fork point: %v, want invalid argument", err)
	}
}

// TestMergeForkPointTravels: an export of a fork keeps its fork point,
// so a copy on another machine can still be merged three-way.
func TestMergeForkPointTravels(t *testing.T) {
	ctx := context.Background()
	s, base, _ := mergeSetup(t, map[string]string{"/a": "a", "/b": "b"}, put("/a", "A"), put("/b", "B"))
	file := t.TempDir() + "/fork.avfs"
	if _, err := s.Export(ctx, "default", "fork", file); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "default", "fork", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, file, "default", "fork2", Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Merge(ctx, "fork2", MergeOptions{}, Meta{}); err != nil {
		t.Fatal(err)
	}
	if got := files(t, base); got["/a"] != "A 0644" || got["/b"] != "B 0644" {
		t.Fatalf("merge of an imported fork: %v", got)
	}
	if cps, _ := s.Vault("default", "fork2").Checkpoints(ctx); len(cps) != 0 {
		t.Fatalf("the fork point shows among checkpoints: %v", cps)
	}
}

// TestMergeModel drives random changes on both sides of a fork and
// checks Merge against a per-file model of the three-way rules, for
// each strategy.
func TestMergeModel(t *testing.T) {
	paths := []string{"/a", "/b", "/d/x", "/d/y"}
	type state struct {
		content string
		mode    uint32
		ok      bool
	}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		s, err := Open(ctx, t.TempDir()+"/store.db", Options{})
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		s.Create(ctx, "default", "base", Quota{}, Meta{})
		base, fork := s.Vault("default", "base"), s.Vault("default", "fork")
		model := func(v *Vault) map[string]state {
			m := map[string]state{}
			for _, p := range paths {
				data, e, err := v.ReadFile(ctx, p)
				if err == nil {
					m[p] = state{string(data), ModeBits(e.Mode), true}
				}
			}
			return m
		}
		change := func(v *Vault, label string) {
			for i := range rapid.IntRange(0, 5).Draw(rt, label+"-n") {
				p := rapid.SampledFrom(paths).Draw(rt, fmt.Sprintf("%s-%d-path", label, i))
				var err error
				switch rapid.IntRange(0, 3).Draw(rt, fmt.Sprintf("%s-%d-op", label, i)) {
				case 0:
					c := rapid.SampledFrom([]string{"\x00one", "\x00two", "\x00three"}).Draw(rt, fmt.Sprintf("%s-%d-content", label, i))
					_, err = v.WriteFile(ctx, p, []byte(c), WriteOptions{Parents: true}, Meta{})
				case 1:
					err = v.Remove(ctx, p, RemoveOptions{}, Meta{})
				case 2:
					m := rapid.SampledFrom([]fs.FileMode{0o644, 0o600}).Draw(rt, fmt.Sprintf("%s-%d-mode", label, i))
					_, err = v.SetAttr(ctx, p, &m, nil, Meta{})
				case 3:
					err = v.Remove(ctx, "/d", RemoveOptions{Recursive: true}, Meta{})
				}
				if err != nil && !errors.Is(err, ErrNotFound) {
					rt.Fatal(err)
				}
			}
		}
		change(base, "start")
		if _, err := s.Fork(ctx, "default", "base", "fork", "", Meta{}); err != nil {
			rt.Fatal(err)
		}
		o := model(base)
		change(base, "ours")
		change(fork, "theirs")
		a, b := model(base), model(fork)
		strategy := rapid.SampledFrom([]string{StrategyNone, StrategyOurs, StrategyTheirs}).Draw(rt, "strategy")

		want, conflicts := map[string]state{}, []string{}
		for _, p := range paths {
			so, sa, sb := o[p], a[p], b[p]
			var r state
			switch {
			case sa == sb, so == sb:
				r = sa
			case so == sa:
				r = sb
			case !sa.ok || !sb.ok:
				conflicts = append(conflicts, p)
				r = map[bool]state{true: sb, false: sa}[strategy == StrategyTheirs]
			default:
				r = sa
				switch {
				case sa.content == sb.content, so.ok && so.content == sb.content:
				case so.ok && so.content == sa.content:
					r.content = sb.content
				default:
					conflicts = append(conflicts, p)
					if strategy == StrategyTheirs {
						r.content = sb.content
					}
				}
				var om *uint32
				if so.ok {
					om = &so.mode
				}
				mode, ok := mergeMode(om, sa.mode, sb.mode)
				if !ok {
					conflicts = append(conflicts, p)
					if strategy == StrategyTheirs {
						mode = sb.mode
					}
				}
				r.mode = mode
			}
			if r.ok {
				want[p] = r
			}
		}
		res, err := base.Merge(ctx, "fork", MergeOptions{Strategy: strategy}, Meta{})
		var got []string
		for _, c := range res.Conflicts {
			got = append(got, c.Path)
		}
		sort.Strings(got)
		sort.Strings(conflicts)
		if fmt.Sprint(got) != fmt.Sprint(conflicts) {
			rt.Fatalf("conflicts %v (%+v), want %v", got, res.Conflicts, conflicts)
		}
		if strategy == StrategyNone && len(conflicts) > 0 {
			if !errors.Is(err, ErrMergeConflict) {
				rt.Fatalf("merge with conflicts: %v", err)
			}
			want = a
		} else if err != nil {
			rt.Fatal(err)
		}
		if g := model(base); fmt.Sprint(g) != fmt.Sprint(want) {
			rt.Fatalf("after merge (fork point %v, ours %v, theirs %v):\n%v\nwant\n%v", o, a, b, g, want)
		}
		if g := model(fork); fmt.Sprint(g) != fmt.Sprint(b) {
			rt.Fatalf("the merge changed the fork: %v, was %v", g, b)
		}
		if err := inodeClash(base); err != nil {
			rt.Fatal(err)
		}
	})
}

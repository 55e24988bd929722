package mount

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/avfs/avfs/vault"
	"golang.org/x/sys/unix"
)

// A twin runs a tool twice, the same way: in a FUSE mount of a fresh
// vault and in a directory of the host's file system (t.TempDir, ext4 on
// this machine and in CI), and compares what each run printed, its exit
// status and the tree it left behind. ext4 is the reference: a
// difference is the mount's.
type twin struct {
	t     *testing.T
	m     *Mount
	v     *vault.Vault
	store string
	sites [2]site
	links bool     // link(2) works in the mount
	norm  []normal // applied to output, names and symlink targets
	// unlinked is what a tool prints only in a mount without hard links
	// (a warning that it copies instead): cut from the mount's output
	// before the comparison, and logged.
	unlinked []*regexp.Regexp
	linked   []string // host files with several links, when the mount has none
}

// site is one of a twin's two roots.
type site struct {
	name string // "mount" or "ext4"
	root string
	home string // HOME for the tools, outside root
}

type normal struct {
	re  *regexp.Regexp
	new string
}

// durations in tools' output: "in 0.52s", "0.003s", "(12ms)", "1m 2s".
var durations = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m)\b`)

// newTwin mounts a fresh vault and makes the host directory beside it.
func newTwin(t *testing.T) *twin {
	t.Helper()
	v, store := storeVault(t, vault.Quota{}, vault.Options{})
	m := mountVault(t, v, Options{})
	tw := &twin{t: t, m: m, v: v, store: store, sites: [2]site{
		{name: "mount", root: m.Dir(), home: t.TempDir()},
		{name: "ext4", root: t.TempDir(), home: t.TempDir()},
	}}
	tw.links = mountLinks(t, m.Dir())
	if !tw.links {
		t.Log("the mount has no hard links yet (link(2) answers EPERM): link counts of files are not compared, and the tools fall back (git and tar as noted below, cargo and pnpm copy)")
	}
	return tw
}

// mountLinks tells whether link(2) works in the mount. It may fail only
// with EPERM, the answer of a mount without hard links.
func mountLinks(t *testing.T, dir string) bool {
	t.Helper()
	a, b := filepath.Join(dir, ".probe"), filepath.Join(dir, ".probe-link")
	writeFile(t, a, "probe")
	defer os.Remove(a)
	err := os.Link(a, b)
	if err == nil {
		if st := statT(t, a); st.Nlink != 2 {
			t.Fatalf("after link(2) the file has %d links, want 2", st.Nlink)
		}
		if err := os.Remove(b); err != nil {
			t.Fatal(err)
		}
		return true
	}
	wantErrno(t, "link(2) in the mount", err, syscall.EPERM)
	return false
}

// normalize adds a rewrite of output, names and symlink targets (after
// the roots, which become ROOT, and durations, which become D).
func (tw *twin) normalize(expr, repl string) {
	tw.norm = append(tw.norm, normal{regexp.MustCompile(expr), repl})
}

func (tw *twin) clean(s site, text string) string {
	text = strings.ReplaceAll(text, s.root, "ROOT")
	text = strings.ReplaceAll(text, s.home, "HOME")
	text = durations.ReplaceAllString(text, "D")
	for _, n := range tw.norm {
		text = n.re.ReplaceAllString(text, n.new)
	}
	return text
}

// withoutLinks names output that a tool prints in a mount without hard
// links only; see unlinked.
func (tw *twin) withoutLinks(expr string) {
	if !tw.links {
		tw.unlinked = append(tw.unlinked, regexp.MustCompile(expr))
	}
}

// each calls fn for both sites, the mount first.
func (tw *twin) each(fn func(s site)) {
	for _, s := range tw.sites {
		fn(s)
	}
}

// write writes a file under both roots, creating its directories.
func (tw *twin) write(rel, content string) {
	tw.t.Helper()
	tw.each(func(s site) {
		p := filepath.Join(s.root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tw.t.Fatal(err)
		}
		writeFile(tw.t, p, content)
	})
}

// exec runs a command in dir (relative to root) of site s with env; in
// the arguments and env, {root} and {home} stand for the site's. It
// returns the output (stdout then stderr, normalized) and exit status.
func (tw *twin) exec(s site, env []string, dir string, argv ...string) (string, int) {
	tw.t.Helper()
	sub := func(x string) string {
		return strings.ReplaceAll(strings.ReplaceAll(x, "{root}", s.root), "{home}", s.home)
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = sub(a)
	}
	cmd := commandIn(filepath.Join(s.root, dir), args[0], args[1:]...)
	for _, e := range env {
		cmd.Env = append(cmd.Env, sub(e))
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee := (*osexec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		tw.t.Fatalf("%s: %s: %v", s.name, strings.Join(argv, " "), err)
	}
	return tw.clean(s, stdout.String()+stderr.String()), code
}

// run runs a command in both sites and requires the same exit status
// and output; it returns the output.
func (tw *twin) run(env []string, dir string, argv ...string) (string, int) {
	tw.t.Helper()
	mout, mcode := tw.exec(tw.sites[0], env, dir, argv...)
	hout, hcode := tw.exec(tw.sites[1], env, dir, argv...)
	for _, re := range tw.unlinked {
		if cut := re.FindString(mout); cut != "" {
			tw.t.Logf("%s, in the mount without hard links: %q", strings.Join(argv, " "), cut)
			mout = re.ReplaceAllString(mout, "")
		}
	}
	if mcode != hcode || mout != hout {
		tw.t.Fatalf("%s differs in the mount:\nmount: exit %d\n%s\next4: exit %d\n%s", strings.Join(argv, " "), mcode, mout, hcode, hout)
	}
	return hout, hcode
}

// runLines is run for a command whose lines come in any order (go build
// -v in parallel): it compares them sorted.
func (tw *twin) runLines(env []string, dir string, argv ...string) []string {
	tw.t.Helper()
	var lines [2][]string
	var codes [2]int
	for i, s := range tw.sites {
		out, code := tw.exec(s, env, dir, argv...)
		lines[i], codes[i] = strings.Split(strings.TrimSpace(out), "\n"), code
		slices.Sort(lines[i])
	}
	if codes[0] != 0 || codes[1] != 0 || !slices.Equal(lines[0], lines[1]) {
		tw.t.Fatalf("%s differs in the mount:\nmount: exit %d\n%s\next4: exit %d\n%s", strings.Join(argv, " "),
			codes[0], strings.Join(lines[0], "\n"), codes[1], strings.Join(lines[1], "\n"))
	}
	return lines[1]
}

// ok is run for a command that must succeed.
func (tw *twin) ok(env []string, dir string, argv ...string) string {
	tw.t.Helper()
	out, code := tw.run(env, dir, argv...)
	if code != 0 {
		tw.t.Fatalf("%s: exit %d in both:\n%s", strings.Join(argv, " "), code, out)
	}
	return out
}

// treeOpts says what a tree comparison looks at beyond names, types,
// permission bits, owners and directories' link counts.
type treeOpts struct {
	skip   func(rel string) bool // leave out this entry and what is under it
	opaque func(rel string) bool // compare neither size nor content
	mtimes bool                  // compare modification times
}

// compareTrees lists dir (relative to root) in both sites and reports
// every entry that differs. Files' link counts are compared when the
// mount has hard links; otherwise the host's linked files are noted.
func (tw *twin) compareTrees(dir string, o treeOpts) {
	tw.t.Helper()
	var lists [2][]string
	for i, s := range tw.sites {
		lists[i] = tw.list(s, dir, o)
	}
	only := func(a, b []string) []string {
		var out []string
		for _, x := range a {
			if _, found := slices.BinarySearch(b, x); !found {
				out = append(out, x)
			}
		}
		return out
	}
	inMount, onHost := only(lists[0], lists[1]), only(lists[1], lists[0])
	if len(inMount)+len(onHost) > 0 || len(lists[0]) != len(lists[1]) {
		tw.t.Errorf("the tree in %q differs in the mount (%d entries, ext4 %d):\nonly in the mount:\n  %s\nonly on ext4:\n  %s",
			dir, len(lists[0]), len(lists[1]), strings.Join(inMount, "\n  "), strings.Join(onHost, "\n  "))
	}
}

// list describes every entry under root/dir, one sorted line each.
func (tw *twin) list(s site, dir string, o treeOpts) []string {
	tw.t.Helper()
	base := filepath.Join(s.root, dir)
	var out []string
	err := filepath.WalkDir(base, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if o.skip != nil && o.skip(rel) {
			if p == base {
				return nil
			}
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s %s %04o %d:%d", tw.clean(s, rel), kind(st.Mode), st.Mode&0o7777, st.Uid, st.Gid)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			line += fmt.Sprintf(" links=%d", st.Nlink)
		case syscall.S_IFREG:
			if tw.links {
				line += fmt.Sprintf(" links=%d", st.Nlink)
			} else if st.Nlink > 1 && s.name == "ext4" {
				tw.linked = append(tw.linked, filepath.Join(dir, rel))
			}
			if o.opaque == nil || !o.opaque(rel) {
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				sum := sha256.Sum256(data)
				line += fmt.Sprintf(" size=%d sha=%s", st.Size, hex.EncodeToString(sum[:6]))
			}
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + tw.clean(s, target)
		case syscall.S_IFCHR, syscall.S_IFBLK:
			line += fmt.Sprintf(" dev=%d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if o.mtimes {
			line += fmt.Sprintf(" mtime=%d.%09d", st.Mtim.Sec, st.Mtim.Nsec)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		tw.t.Fatalf("%s: listing %s: %v", s.name, dir, err)
	}
	slices.Sort(out)
	return out
}

// noteLinks logs the host's files with several links, which the mount
// could not make: what hard links will be compared on once it has them.
func (tw *twin) noteLinks() {
	if len(tw.linked) > 0 {
		slices.Sort(tw.linked)
		tw.t.Logf("on ext4 these files have several links, in the mount one (no hard links yet): %s", strings.Join(slices.Compact(tw.linked), " "))
	}
}

func kind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFLNK:
		return "symlink"
	case syscall.S_IFIFO:
		return "fifo"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFCHR:
		return "chardev"
	case syscall.S_IFBLK:
		return "blockdev"
	}
	return fmt.Sprintf("mode%o", mode)
}

// needTool returns the path of a program a tool test runs. A developer
// without it gets a skip; CI (CI set), where .ci/run installs every tool
// these tests use, a failure: a green CI never hides an untested tool.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := osexec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (.ci/run installs it: scripts/install-tools.sh): %v", name, err)
	}
	t.Skipf("%s is not installed (scripts/install-tools.sh installs it): %v", name, err)
	return ""
}

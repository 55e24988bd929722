package mount

import (
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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

// run runs a command with its working directory in the mount
// (commandIn).
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := commandIn(dir, name, args...)
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

// toolEnv is the environment of every tool run in a twin: the test's
// PATH (go, cargo, node) and a home of the site's own, so no user
// configuration or cache is shared between the two runs.
func toolEnv(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME={home}", "LC_ALL=C", "TZ=UTC"}, extra...)
}

// gitEnv makes commits reproducible: the same author, committer and
// dates give the same object names in both sites.
var gitEnv = toolEnv("GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_AUTHOR_DATE=2001-02-03T04:05:06Z",
	"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_COMMITTER_DATE=2001-02-03T04:05:06Z")

// gitMeta are the files of a .git whose content holds stat data or
// paths (the index, a clone's remote and reflog), compared by name, type
// and mode only.
func gitMeta(rel string) bool {
	base := filepath.Base(rel)
	return base == "index" || base == "config" || base == "FETCH_HEAD" || strings.Contains(rel, ".git/logs/")
}

// TestGitLikeExt4: init, commits on two branches, checkout, a local
// clone, gc and fsck give the same output, objects and work trees in the
// mount as on ext4. clone --local hard-links the objects.
func TestGitLikeExt4(t *testing.T) {
	needTool(t, "git")
	tw := newTwin(t)
	git := func(dir string, args ...string) string {
		t.Helper()
		return tw.ok(gitEnv, dir, append([]string{"git", "-c", "pack.threads=1", "-c", "gc.autoDetach=false"}, args...)...)
	}
	git("", "init", "-q", "-b", "main", "repo")
	tw.write("repo/README", "readme\n")
	tw.write("repo/src/main.go", "package main\n\nfunc main() {}\n")
	for i := range 20 {
		tw.write(fmt.Sprintf("repo/src/pkg/f%02d.txt", i), strings.Repeat("line\n", i+1))
	}
	git("repo", "add", "-A")
	git("repo", "commit", "-q", "-m", "first")
	git("repo", "branch", "feature")
	git("repo", "checkout", "-q", "feature")
	tw.write("repo/src/main.go", "package main\n\nfunc main() { println(1) }\n")
	tw.each(func(s site) {
		if err := os.Remove(filepath.Join(s.root, "repo/src/pkg/f03.txt")); err != nil {
			t.Fatal(err)
		}
	})
	git("repo", "commit", "-q", "-am", "second")
	git("repo", "checkout", "-q", "main")
	if got := git("repo", "log", "--all", "--format=%H %s"); !strings.Contains(got, " second\n") || !strings.Contains(got, " first\n") {
		t.Fatalf("git log: %q", got)
	}
	git("repo", "merge", "-q", "--ff-only", "feature")
	if got := git("repo", "status", "--porcelain"); got != "" {
		t.Fatalf("git status: %q, want clean", got)
	}

	// clone --local hard-links the objects, and insists on it.
	if tw.links {
		git("", "clone", "-q", "--local", "repo", "clone")
	} else {
		out, code := tw.exec(tw.sites[0], gitEnv, "", "git", "clone", "-q", "--local", "repo", "clone")
		if code != 128 || !strings.Contains(out, "failed to create link") {
			t.Fatalf("git clone --local in a mount without hard links: exit %d, want 128 and \"failed to create link\":\n%s", code, out)
		}
		t.Logf("git clone --local in the mount, without hard links: exit %d: %s", code, strings.TrimSpace(out))
		// Without --local, a local clone copies what it cannot link.
		mount := tw.sites[0]
		if out, code := tw.exec(mount, gitEnv, "", "git", "clone", "-q", "repo", "copied"); code != 0 {
			t.Fatalf("git clone in the mount: exit %d\n%s", code, out)
		}
		if out, code := tw.exec(mount, gitEnv, "copied", "git", "fsck", "--full", "--no-progress", "--strict"); code != 0 || out != "" {
			t.Fatalf("git fsck of the copied clone: exit %d\n%s", code, out)
		}
		if err := os.RemoveAll(filepath.Join(mount.root, "copied")); err != nil {
			t.Fatal(err)
		}
		// Copies and links differ in mode (git copies 0644, links keep
		// 0444): both sites copy for the comparison.
		git("", "clone", "-q", "--no-hardlinks", "repo", "clone")
	}
	tw.compareTrees("", treeOpts{opaque: gitMeta})

	git("repo", "gc", "-q")
	for _, dir := range []string{"repo", "clone"} {
		if got := git(dir, "fsck", "--full", "--no-progress", "--strict"); got != "" {
			t.Errorf("git fsck in %s: %q", dir, got)
		}
		if got := git(dir, "status", "--porcelain"); got != "" {
			t.Errorf("git status in %s: %q, want clean", dir, got)
		}
	}
	git("clone", "checkout", "-q", "-b", "topic", "origin/feature")
	git("clone", "log", "--format=%H %s", "topic")
	tw.compareTrees("", treeOpts{opaque: gitMeta})
	tw.noteLinks()
}

// cargoEnv runs cargo with a CARGO_HOME of the site's own; rustup's
// toolchains stay where the test's environment has them.
func cargoEnv() []string {
	rustup := os.Getenv("RUSTUP_HOME")
	if rustup == "" {
		if home, err := os.UserHomeDir(); err == nil {
			rustup = filepath.Join(home, ".rustup")
		}
	}
	return toolEnv("RUSTUP_HOME="+rustup, "CARGO_HOME={home}/.cargo", "CARGO_TERM_COLOR=never", "CARGO_TERM_PROGRESS_WHEN=never")
}

// The crate cargo builds: a library, a binary using it, and an
// integration test; no dependencies, so no registry.
var crate = map[string]string{
	"crate/Cargo.toml":  "[package]\nname = \"twin\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
	"crate/src/lib.rs":  "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n}\n",
	"crate/src/main.rs": "fn main() {\n    println!(\"{}\", twin::add(40, 2));\n}\n",
	"crate/tests/it.rs": "#[test]\nfn from_outside() {\n    assert_eq!(twin::add(1, 2), 3);\n}\n",
}

// TestCargoLikeExt4: cargo build and test of a crate, a rebuild after
// touch and after an edit, give the same output and the same target
// tree in the mount as on ext4. cargo hard-links each final binary from
// deps/ (and copies where link fails).
func TestCargoLikeExt4(t *testing.T) {
	needTool(t, "cargo")
	tw := newTwin(t)
	tw.normalize(`-[0-9a-f]{16}\b`, "-HASH")
	tw.normalize(`thread '([^']*)' \(\d+\)`, "thread '$1'")
	// rustc hard-links its incremental cache, and warns where it copies.
	tw.withoutLinks(`(?m)^warning: hard linking files in the incremental compilation cache failed.*\n\n`)
	tw.withoutLinks("(?m)^warning: `twin` \\([^)]*\\) generated \\d+ warnings?( \\(\\d+ duplicates?\\))?\n")
	env := cargoEnv()
	for p, content := range crate {
		tw.write(p, content)
	}
	cargo := func(args ...string) string {
		t.Helper()
		return tw.ok(env, "crate", append([]string{"cargo"}, args...)...)
	}
	if got := cargo("build", "--offline"); !strings.Contains(got, "Compiling twin v0.1.0 (ROOT/crate)") {
		t.Fatalf("cargo build: %s", got)
	}
	if got := tw.ok(env, "crate", "./target/debug/twin"); got != "42\n" {
		t.Fatalf("the binary printed %q", got)
	}
	if got := cargo("test", "--offline"); !strings.Contains(got, "test tests::adds ... ok") || !strings.Contains(got, "test from_outside ... ok") {
		t.Fatalf("cargo test: %s", got)
	}
	if got := cargo("build", "--offline"); strings.Contains(got, "Compiling") {
		t.Fatalf("cargo build with nothing changed compiled again: %s", got)
	}
	tw.ok(env, "crate", "touch", "src/main.rs")
	if got := cargo("build", "--offline"); !strings.Contains(got, "Compiling twin") {
		t.Fatalf("cargo build after touch compiled nothing: %s", got)
	}
	tw.write("crate/src/lib.rs", strings.Replace(crate["crate/src/lib.rs"], "a + b", "a * b", 1))
	if got := tw.ok(env, "crate", "cargo", "run", "--offline", "-q"); got != "80\n" {
		t.Fatalf("cargo run after the edit printed %q", got)
	}
	if out, code := tw.run(env, "crate", "cargo", "test", "--offline"); code != 101 || !strings.Contains(out, "test from_outside ... FAILED") {
		t.Fatalf("cargo test after the edit: exit %d, want 101:\n%s", code, out)
	}
	// The build's files by name, kind and mode (their content holds the
	// paths); rustc's incremental sessions are named by time, and cargo
	// keeps the warnings it replays (rustc's about copying, without hard
	// links) in .fingerprint/*/output-*.
	warnings := regexp.MustCompile(`^target/debug/\.fingerprint/[^/]+/output-`)
	tw.compareTrees("crate", treeOpts{
		skip: func(rel string) bool {
			return strings.HasPrefix(rel, "target/debug/incremental/") || !tw.links && warnings.MatchString(rel)
		},
		opaque: func(rel string) bool { return strings.HasPrefix(rel, "target/") },
	})
	tw.noteLinks()
}

// goEnv runs the go command off the network, with the module cache and
// GOPATH of the site's own. GOCACHE is the caller's.
func goEnv(gocache string) []string {
	return toolEnv("GOCACHE="+gocache, "GOMODCACHE={home}/gomod", "GOPATH={home}/go", "GOFLAGS=-mod=mod",
		"GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "GOTELEMETRY=off", "GOENV=off")
}

// TestGoLikeExt4: go build, a cached rebuild, go vet and go test of a
// module, passing and failing, give the same output in the mount as on
// ext4.
func TestGoLikeExt4(t *testing.T) {
	needTool(t, "go")
	tw := newTwin(t)
	tw.write("mod/go.mod", "module example.com/m\n\ngo 1.21\n")
	tw.write("mod/hello/main.go", "package main\n\nfunc main() { println(\"hello\") }\n")
	tw.write("mod/util/util.go", "package util\n\n// Double doubles.\nfunc Double(x int) int { return 2 * x }\n")
	tw.write("mod/util/util_test.go", "package util\n\nimport \"testing\"\n\nfunc TestDouble(t *testing.T) {\n\tif Double(2) != 4 {\n\t\tt.Fatal(\"Double(2) != 4\")\n\t}\n}\n")
	tw.write("mod/main.go", "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/m/util\"\n)\n\nfunc main() { fmt.Println(util.Double(21)) }\n")

	// The build cache is the test's own: one filled from nothing compiles
	// the standard library, 5 s for the runtime alone on an idle machine
	// and 30 to 50 s per site under a loaded CI's, past what this test
	// may take. The module's packages are compiled for each site all the
	// same: their cache keys hold the directory.
	gocache := os.Getenv("GOCACHE")
	if gocache == "" {
		out, err := osexec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			t.Fatalf("go env GOCACHE: %v", err)
		}
		gocache = strings.TrimSpace(string(out))
	}
	env := goEnv(gocache)
	if got := tw.runLines(env, "mod", "go", "build", "-v", "-o", "../bin/", "./..."); !slices.Equal(got, []string{"example.com/m", "example.com/m/hello", "example.com/m/util"}) {
		t.Fatalf("go build -v compiled %q, want the module's three packages", got)
	}
	if got := tw.ok(env, "mod", "go", "build", "-v", "-o", "../bin/", "./..."); got != "" {
		t.Fatalf("go build again compiled %q, want everything from the cache", got)
	}
	if got := tw.ok(env, "", "./bin/m"); got != "42\n" {
		t.Fatalf("m printed %q", got)
	}
	if got := tw.ok(env, "", "./bin/hello"); got != "hello\n" {
		t.Fatalf("hello printed %q", got)
	}
	tw.ok(env, "mod", "go", "vet", "./...")
	if got := tw.ok(env, "mod", "go", "test", "-count=1", "./..."); !strings.Contains(got, "ok  \texample.com/m/util\tD") {
		t.Fatalf("go test: %s", got)
	}
	tw.write("mod/util/util.go", "package util\n\n// Double doubles.\nfunc Double(x int) int { return 3 * x }\n")
	if out, code := tw.run(env, "mod", "go", "test", "-count=1", "./..."); code != 1 || !strings.Contains(out, "Double(2) != 4") {
		t.Fatalf("go test of the broken package: exit %d, want 1:\n%s", code, out)
	}
	tw.compareTrees("", treeOpts{
		opaque: func(rel string) bool { return strings.HasPrefix(rel, "bin/") },
	})
}

// npmEnv keeps npm's and pnpm's caches and state in the site's home, and
// them off the network.
var npmEnv = toolEnv("npm_config_cache={home}/.npm", "npm_config_offline=true", "npm_config_update_notifier=false",
	"npm_config_audit=false", "npm_config_fund=false", "XDG_CACHE_HOME={home}/.cache", "XDG_DATA_HOME={home}/.local/share",
	"XDG_STATE_HOME={home}/.local/state", "XDG_CONFIG_HOME={home}/.config")

// A package with no registry dependency: lib, and app, which depends on
// lib through a file: link, builds dist/ and tests it.
var npmPackages = map[string]string{
	"lib/package.json": `{"name": "lib", "version": "1.0.0", "main": "index.js"}` + "\n",
	"lib/index.js":     "exports.shout = s => s.toUpperCase() + '!';\n",
	"app/package.json": `{"name": "app", "version": "1.0.0", "private": true, "dependencies": {"lib": "file:../lib"},
 "scripts": {"build": "node build.js", "test": "node test.js"}}` + "\n",
	"app/build.js": "const fs = require('fs');\nconst { shout } = require('lib');\nfs.mkdirSync('dist', { recursive: true });\n" +
		"fs.writeFileSync('dist/out.js', 'module.exports = ' + JSON.stringify(shout('built')) + ';\\n');\nconsole.log('built');\n",
	"app/test.js": "const assert = require('assert');\nassert.strictEqual(require('./dist/out.js'), 'BUILT!');\nconsole.log('ok');\n",
}

// TestNpmLikeExt4: npm install of a local dependency (a symlink), npm
// run build and npm test give the same output and tree in the mount as on
// ext4.
func TestNpmLikeExt4(t *testing.T) {
	needTool(t, "node")
	needTool(t, "npm")
	tw := newTwin(t)
	for p, content := range npmPackages {
		tw.write(p, content)
	}
	tw.ok(npmEnv, "app", "npm", "install", "--no-progress")
	if got := tw.ok(npmEnv, "app", "npm", "run", "build"); !strings.Contains(got, "\nbuilt\n") {
		t.Fatalf("npm run build: %s", got)
	}
	if got := tw.ok(npmEnv, "app", "npm", "test"); !strings.Contains(got, "\nok\n") {
		t.Fatalf("npm test: %s", got)
	}
	tw.write("lib/index.js", "exports.shout = s => s + '?';\n")
	tw.ok(npmEnv, "app", "npm", "run", "build")
	if out, code := tw.run(npmEnv, "app", "npm", "test"); code != 1 || !strings.Contains(out, "AssertionError") {
		t.Fatalf("npm test after the change: exit %d, want 1:\n%s", code, out)
	}
	tw.compareTrees("", treeOpts{})
}

// TestPnpmLikeExt4: pnpm installs a package from a tarball into its
// content store and hard-links its files into node_modules/.pnpm, with
// symlinks to them (it copies where link fails); node resolves through
// them, and the trees match ext4's.
func TestPnpmLikeExt4(t *testing.T) {
	needTool(t, "node")
	needTool(t, "npm")
	needTool(t, "pnpm")
	tw := newTwin(t)
	for p, content := range npmPackages {
		tw.write(p, content)
	}
	tw.write("app/package.json", `{"name": "app", "version": "1.0.0", "private": true, "dependencies": {"lib": "file:../lib-1.0.0.tgz"},
 "scripts": {"test": "node build.js && node test.js"}}`+"\n")
	tw.ok(npmEnv, "lib", "npm", "pack", "--pack-destination", "..")
	tw.ok(npmEnv, "app", "pnpm", "install", "--offline", "--store-dir", "{root}/store")
	if got := tw.ok(npmEnv, "app", "pnpm", "test"); !strings.Contains(got, "\nbuilt\nok\n") {
		t.Fatalf("pnpm test: %s", got)
	}
	// pnpm names a project in its store by a hash of its path, and keeps
	// times and paths in its state files.
	tw.normalize(`projects/[0-9a-f]{32}$`, "projects/HASH")
	state := regexp.MustCompile(`^store/v10/index/|^app/node_modules/\.(modules\.yaml|pnpm-workspace-state-v1\.json)$`)
	tw.compareTrees("", treeOpts{opaque: state.MatchString})
	tw.noteLinks()
}

const makefile = `OBJS := $(patsubst %.in,%.o,$(sort $(wildcard *.in)))

all: out.txt

out.txt: $(OBJS)
	cat $(OBJS) > $@

%.o: %.in
	tr a-z A-Z < $< > $@

clean:
	rm -f $(OBJS) out.txt
`

// TestMakeLikeExt4: make -j4 builds, make -q finds everything up to
// date, and after touch rebuilds exactly what depends on the touched
// file, by mtimes, in the mount as on ext4.
func TestMakeLikeExt4(t *testing.T) {
	needTool(t, "make")
	tw := newTwin(t)
	env := toolEnv()
	tw.write("Makefile", makefile)
	for i := range 8 {
		tw.write(fmt.Sprintf("%c.in", 'a'+i), fmt.Sprintf("input %d\n", i))
	}
	if got := tw.runLines(env, "", "make", "-j4"); len(got) != 9 {
		t.Fatalf("make -j4 ran %d commands, want 9:\n%s", len(got), strings.Join(got, "\n"))
	}
	if out, code := tw.run(env, "", "make", "-q"); code != 0 {
		t.Fatalf("make -q after the build: exit %d, want 0 (up to date):\n%s", code, out)
	}
	tw.ok(env, "", "make", "-j4")
	// touch until the clock has moved past c.o's mtime (a build and a
	// touch may fall within one tick of the file system's clock).
	tw.each(func(s site) {
		checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if out, code := tw.exec(s, env, "", "touch", "c.in"); code != 0 {
				t.Fatalf("%s: touch: exit %d: %s", s.name, code, out)
			}
			in, obj := statT(t, filepath.Join(s.root, "c.in")), statT(t, filepath.Join(s.root, "c.o"))
			if in.Mtim.Nano() <= obj.Mtim.Nano() {
				return fmt.Errorf("%s: c.in (%d) is not newer than c.o (%d)", s.name, in.Mtim.Nano(), obj.Mtim.Nano())
			}
			return nil
		})
	})
	if out, code := tw.run(env, "", "make", "-q"); code != 1 {
		t.Fatalf("make -q after touch: exit %d, want 1 (out of date):\n%s", code, out)
	}
	if got := tw.runLines(env, "", "make", "-j4"); !slices.Equal(got, []string{"cat a.o b.o c.o d.o e.o f.o g.o h.o > out.txt", "tr a-z A-Z < c.in > c.o"}) {
		t.Fatalf("make -j4 after touching c.in ran %q, want c.o and out.txt only", got)
	}
	if out, code := tw.run(env, "", "make", "-q"); code != 0 {
		t.Fatalf("make -q after the rebuild: exit %d, want 0:\n%s", code, out)
	}
	tw.compareTrees("", treeOpts{})
	tw.ok(env, "", "make", "clean")
	tw.compareTrees("", treeOpts{})
}

// tarSource makes, on the host, a tree with what tar keeps: owners
// other than root, setuid, setgid and sticky bits, a fifo, a device
// node, a symlink, a hard link and a distinct mtime on every entry.
func tarSource(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	p := func(name string) string { return filepath.Join(src, name) }
	for _, d := range []string{"sticky", "sgid", "deep/er/still"} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, p("plain"), "plain content\n")
	writeFile(t, p("suid"), "#!/bin/sh\necho suid\n")
	writeFile(t, p("sgidfile"), "sgid\n")
	writeFile(t, p("sgid/inner"), "inner\n")
	writeFile(t, p("deep/er/still/leaf"), strings.Repeat("leaf\n", 1000))
	if err := unix.Mkfifo(p("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("plain", p("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p("plain"), p("same-as-plain")); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		name     string
		uid, gid int
		mode     os.FileMode
	}{
		{"sticky", 1000, 1000, 0o777 | os.ModeSticky},
		{"sgid", 1001, 1002, 0o775 | os.ModeSetgid},
		{"sgid/inner", 1001, 1002, 0o644},
		{"plain", 1234, 5678, 0o640},
		{"suid", 0, 0, 0o755 | os.ModeSetuid},
		{"sgidfile", 1000, 1000, 0o755 | os.ModeSetgid},
		{"fifo", 1000, 1000, 0o600 | os.ModeNamedPipe},
		{"null", 0, 0, 0o666},
		{"deep", 1000, 1000, 0o750},
		{"deep/er/still/leaf", 1000, 1000, 0o444},
	} {
		if err := os.Lchown(p(e.name), e.uid, e.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p(e.name), e.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(p("link"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	// Times last, directories after what is in them.
	var names []string
	filepath.WalkDir(src, func(q string, _ os.DirEntry, err error) error {
		names = append(names, q)
		return err
	})
	slices.Reverse(names)
	for i, q := range names {
		ts := []unix.Timespec{unix.NsecToTimespec(1e18 + int64(i)*86400e9 + 123456789), unix.NsecToTimespec(981173106e9 + int64(i)*3600e9 + 987654321)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, q, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// TestTarLikeExt4: an archive made on the host extracts in the mount
// with every owner, mode, type and mtime (tar --same-owner -p), as it
// does on ext4, and archives back to the same listing.
func TestTarLikeExt4(t *testing.T) {
	needTool(t, "tar")
	if os.Getuid() != 0 {
		t.Fatalf("the tar test keeps owners: it needs root")
	}
	tw := newTwin(t)
	env := toolEnv()
	src := tarSource(t)
	archive := filepath.Join(t.TempDir(), "src.tar")
	if out, err := osexec.Command("tar", "--create", "--sort=name", "--numeric-owner", "--format=posix", "-f", archive, "-C", src, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar --create on the host: %v\n%s", err, out)
	}
	tw.each(func(s site) {
		if err := os.Mkdir(filepath.Join(s.root, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	extract := []string{"tar", "--extract", "--same-owner", "-p", "--numeric-owner", "-f", archive, "-C", "x"}
	if tw.links {
		tw.ok(env, "", extract...)
	} else {
		// tar has no fallback for a hard link: without them, it reports
		// the one entry and extracts the rest. On ext4, the same without
		// the link.
		if out, code := tw.exec(tw.sites[1], env, "", append(extract, "--exclude=./same-as-plain")...); code != 0 {
			t.Fatalf("tar --extract on ext4: exit %d\n%s", code, out)
		}
		out, code := tw.exec(tw.sites[0], env, "", extract...)
		if want := "tar: ./same-as-plain: Cannot hard link to './plain': Operation not permitted\ntar: Exiting with failure status due to previous errors\n"; code != 2 || out != want {
			t.Fatalf("tar --extract in the mount without hard links: exit %d, want 2 and %q:\n%s", code, want, out)
		}
		t.Logf("tar --extract in the mount without hard links: exit %d: %s", code, out)
	}
	tw.compareTrees("x", treeOpts{mtimes: true, skip: func(rel string) bool { return rel == "." }})

	// Archived back, the trees list as the source did.
	list := []string{"tar", "--list", "-v", "--full-time", "--numeric-owner", "-f"}
	want, code := tw.exec(tw.sites[1], env, "", append(list, archive)...)
	if code != 0 {
		t.Fatalf("tar --list: exit %d\n%s", code, want)
	}
	if !tw.links {
		want = regexp.MustCompile(`(?m)^.* ./same-as-plain link to ./plain\n`).ReplaceAllString(want, "")
	}
	back := []string{"tar", "--create", "--sort=name", "--numeric-owner", "--format=posix", "-f", "{home}/back.tar", "-C", "x", "."}
	tw.ok(env, "", back...)
	tw.each(func(s site) {
		got, code := tw.exec(s, env, "", append(list, "{home}/back.tar")...)
		if code != 0 || got != want {
			t.Errorf("%s: tar --list of the archive made from the extracted tree: exit %d\n%s\nwant (the source's):\n%s", s.name, code, got, want)
		}
	})
	tw.noteLinks()
}

// TestSecondTerminal: what another process changes through the vault
// API (as `avfs write` does) while a file is held open in the mount
// shows in the mount at the next lookup, through the open descriptor
// too; and what a shell changes in the mount, the other process reads.
// The contract is 1 s (TestSeesOtherProcessWrites holds it); this test
// polls up to 10 s, and asserts no time.
func TestSecondTerminal(t *testing.T) {
	v, store := storeVault(t, vault.Quota{}, vault.Options{})
	m := mountVault(t, v, Options{})
	dir := m.Dir()
	sh := func(script string) string {
		t.Helper()
		return run(t, dir, toolEnv(), "sh", "-c", script)
	}
	sh("mkdir -p src && echo one > src/held.txt && echo old > gone.txt && ls -R > /dev/null && cat src/held.txt gone.txt > /dev/null")
	held, err := os.Open(filepath.Join(dir, "src", "held.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	syncMount(t, m)

	otherProcess(t, store, "write", "/src/held.txt", "two\n")
	otherProcess(t, store, "write", "/src/new/deep.txt", "new\n")
	otherProcess(t, store, "rm", "/gone.txt", "")
	shown := func(what string, fn func() error) {
		t.Helper()
		checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			if err := fn(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
	}
	shown("the held descriptor", func() error {
		buf := make([]byte, 16)
		n, err := held.ReadAt(buf, 0)
		if string(buf[:n]) != "two\n" {
			return fmt.Errorf("read %q, %v; want %q", buf[:n], err, "two\n")
		}
		return nil
	})
	shown("a shell in the mount", func() error {
		cmd := osexec.Command("sh", "-c", "cat src/held.txt src/new/deep.txt; ls")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if want := "two\nnew\nsrc\n"; err != nil || string(out) != want {
			return fmt.Errorf("got %q, %v; want %q", out, err, want)
		}
		return nil
	})

	sh("echo three > src/held.txt && mkdir made && echo made > made/it.txt && mv src/new/deep.txt moved.txt")
	for p, want := range map[string]string{"/src/held.txt": "three\n", "/made/it.txt": "made\n", "/moved.txt": "new\n"} {
		shown("the other process reads "+p, func() error {
			got, err := otherProcessOut(store, "read", p, "")
			if err != nil || got != want {
				return fmt.Errorf("got %q, %v; want %q", got, err, want)
			}
			return nil
		})
	}
}

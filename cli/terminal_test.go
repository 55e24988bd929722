package cli

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/creack/pty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// screen collects what a pty shows.
type screen struct{ syncBuffer }

// ansi matches the terminal control sequences shells write (colours,
// cursor moves, titles, bracketed paste), which a person does not read.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>]`)

func (s *screen) String() string {
	return ansi.ReplaceAllString(strings.ReplaceAll(s.syncBuffer.String(), "\r\n", "\n"), "")
}

func (s *screen) reset() {
	s.mu.Lock()
	s.b.Reset()
	s.mu.Unlock()
}

// waitFor polls the screen until re matches, or fails after a deadline.
func (s *screen) waitFor(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	if poll.For(20*time.Second, "the terminal shows "+re, func() (bool, error) { return rx.MatchString(s.String()), nil }) != nil {
		t.Fatalf("the terminal never showed %q; it shows:\n%s", re, s.String())
	}
	return s.String()
}

// onTerminal runs avfs with stdout and stderr on a real pty and returns
// what the terminal showed and the exit status.
func (e *env) onTerminal(args ...string) (string, int) {
	e.t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		e.t.Fatal(err)
	}
	defer ptmx.Close()
	pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 200})
	var scr screen
	done := make(chan struct{})
	go func() { io.Copy(&scr, ptmx); close(done) }()
	code := Main(context.Background(), args, strings.NewReader(""), tty, tty, Options{})
	tty.Close()
	<-done
	return scr.String(), code
}

func TestTerminalShowsTables(t *testing.T) {
	e := newEnv(t)
	e.ok("vault", "create", "tty")
	e.ok("write", "/big.bin", strings.Repeat("z", 5<<20), "--vault", "tty")
	e.ok("checkpoint", "save", "base", "-m", "first", "--vault", "tty")

	out, code := e.onTerminal("vault", "list")
	if code != 0 || !regexp.MustCompile(`NAME +FILES +SIZE +CHECKPOINTS +PARENT +CREATED\n+tty +1 +5.0 MiB +1 +- +(just now|\ds ago)`).MatchString(out) {
		t.Fatalf("vault list on a terminal (exit %d):\n%s", code, out)
	}
	out, _ = e.onTerminal("checkpoint", "list", "--vault", "tty")
	if !regexp.MustCompile(`base +(just now|\ds ago) +1 +5.0 MiB +first`).MatchString(out) {
		t.Fatalf("checkpoint list on a terminal:\n%s", out)
	}
	// JSON on a terminal only when asked for.
	out, _ = e.onTerminal("vault", "list", "--json")
	if !strings.HasPrefix(out, `{"vaults":[`) {
		t.Fatalf("vault list --json on a terminal:\n%s", out)
	}
	// A binary file is not sprayed over the terminal.
	e.run("\xff\xfe\x00", "write", "/b.bin", "--vault", "tty")
	out, code = e.onTerminal("cat", "/b.bin", "--vault", "tty")
	if code != 2 || !strings.Contains(out, "avfs cat --raw /b.bin") {
		t.Fatalf("cat of a binary file on a terminal (exit %d):\n%s", code, out)
	}
	// A progress bar with count, bytes, rate and time.
	src := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(src, n), []byte(strings.Repeat(n, 2048)), 0o644)
	}
	out, code = e.onTerminal("import", src, "/in", "--vault", "tty")
	if code != 0 || !regexp.MustCompile(`import 3/3 files 100% \|█+\| \(6\.0/6\.0 KiB, [0-9.]+ [KM]iB/s\) \[\d+s\]`).MatchString(out) {
		t.Fatalf("import progress on a terminal (exit %d):\n%q", code, out)
	}
	if !regexp.MustCompile(`\n3 files, \d+ dirs?, 6\.0 KiB in \d`).MatchString(out) {
		t.Fatalf("import summary:\n%s", out)
	}
	// Errors in words, with the next command.
	out, code = e.onTerminal("vault", "info", "nope")
	if code != 1 || !strings.Contains(out, "avfs: vault \"nope\": vault not found\nhint: list the vaults with `avfs vault list`, or create this one with `avfs vault create nope`") {
		t.Fatalf("error on a terminal (exit %d):\n%s", code, out)
	}
}

func TestHelp(t *testing.T) {
	a := &app{stdout: io.Discard, stderr: io.Discard}
	root := a.rootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c != root && !c.Hidden && c.Example == "" {
			t.Errorf("%s has no example (add it to examples in help.go)", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: a backtick in the usage becomes the flag's type name: %q", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)

	e := newEnv(t)
	out, code := e.onTerminal("ls", "--help")
	if code != 0 || !strings.Contains(out, "Examples:\n  avfs ls\n  avfs ls -l /src\n") || !regexp.MustCompile(`--vault string +vault to act on`).MatchString(out) {
		t.Fatalf("ls --help (exit %d):\n%s", code, out)
	}
	out, code = e.onTerminal("--version")
	if code != 0 || !regexp.MustCompile(`^avfs \S+ \(commit \S+, built with (make|go build)\)\n$`).MatchString(out) {
		t.Fatalf("--version (exit %d): %q", code, out)
	}
	out, code = e.onTerminal("vault", "creat", "x")
	if code != 2 || !strings.Contains(out, `unknown command "creat" for "avfs vault"; did you mean "create"?`) {
		t.Fatalf("vault creat (exit %d):\n%s", code, out)
	}
}

// TestShellsCompleteNames types into a real bash, zsh and fish on a pty,
// with avfs's completion script loaded, and reads the screen.
func TestShellsCompleteNames(t *testing.T) {
	e := newEnv(t)
	completionFixture(e)
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "avfs")); err != nil {
		t.Fatal(err)
	}
	// What a distribution's bash sources first: cobra's script uses it.
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	for _, sh := range []struct {
		name  string
		args  []string
		setup string
		list  string // the keys that list the candidates
	}{
		{"bash", []string{"--norc", "--noprofile", "-i"}, "source " + bashCompletion + "; source <(avfs completion bash) && echo load''ed", "\t\t"},
		{"zsh", []string{"-f", "-i"}, "autoload -U compinit && compinit -u && source <(avfs completion zsh) && echo load''ed", "\t"},
		{"fish", []string{"--no-config", "-i"}, "avfs completion fish | source; and echo load''ed", "\t"},
	} {
		t.Run(sh.name, func(t *testing.T) {
			path, err := exec.LookPath(sh.name)
			if err != nil {
				missingShell(t, "%s is not installed (.ci/run installs bash-completion, zsh and fish)", sh.name)
			}
			if _, err := os.Stat(bashCompletion); sh.name == "bash" && err != nil {
				missingShell(t, "%s: %v (.ci/run installs bash-completion)", bashCompletion, err)
			}
			home := t.TempDir() // the shells write history and caches there
			cmd := exec.Command(path, sh.args...)
			cmd.Env = []string{"AVFS_TEST_AS_AVFS=1", "AVFS_EXEC_KEEPER=false", "AVFS_HOME=" + e.home, "HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home,
				"PATH=" + bin + ":/usr/bin:/bin", "PS1=$ ", "TERM=xterm", "INPUTRC=/dev/null"}
			ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				cmd.Wait()
				ptmx.Close()
			})
			var scr screen
			go io.Copy(&scr, ptmx)
			typeIn := func(s string) { ptmx.Write([]byte(s)) }
			typeIn(sh.setup + "\n")
			scr.waitFor(t, `loaded`)

			// Listing: both vault names.
			scr.reset()
			typeIn("avfs vault info " + sh.list)
			scr.waitFor(t, `alpha[\s\S]*beta`)
			typeIn("\x15") // ^U: clear the line
			// A unique prefix completes: a path in the vault.
			scr.reset()
			typeIn("avfs cat --vault alpha /src/m\t")
			scr.waitFor(t, `/src/main\.go`)
			typeIn("\x15")
			// A checkpoint name.
			scr.reset()
			typeIn("avfs checkpoint restore --vault alpha be\t")
			scr.waitFor(t, `before-refactor`)
			typeIn("\x15")
			// A flag's values.
			scr.reset()
			typeIn("avfs vault list -o " + sh.list)
			scr.waitFor(t, `json[\s\S]*table[\s\S]*wide|json[\s\S]*yaml`)
			typeIn("\x15")
		})
	}
}

// missingShell skips a shell's completion test on a developer machine
// without it, and fails it in CI (CI set), where .ci/run installs every
// shell: a green CI never hides an untested completion script.
func missingShell(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

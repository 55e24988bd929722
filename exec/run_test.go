package exec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/exec"
)

// hostEnv is the environment a caller would normally pass.
func hostEnv() []string {
	return exec.BuildEnv(exec.DefaultEnvAllow(), os.Environ(), nil)
}

func run(t testing.TB, s exec.Spec) exec.Result {
	t.Helper()
	if s.Timeout == 0 {
		s.Timeout = 10 * time.Second // a hung test fails instead of waiting 300 s
	}
	res, err := exec.Run(context.Background(), s)
	if err != nil {
		t.Fatalf("Run(%q %q) error: %v", s.Argv, s.Shell, err)
	}
	return res
}

func exitCode(r exec.Result) string {
	if r.ExitCode == nil {
		return "nil"
	}
	return strconv.Itoa(*r.ExitCode)
}

// checkFor polls fn every 10 ms until it succeeds or total has passed.
func checkFor(t testing.TB, total time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processGone reports whether pid no longer runs. A killed orphan is
// reparented to PID 1, which may reap it only later; as a zombie it has
// already stopped running, so it counts as gone.
func processGone(pid int) bool {
	if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		return true
	}
	state, err := processState(pid)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	return state == 'Z'
}

// processState is pid's state letter in /proc (R, S, T, Z...).
func processState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')') // the state follows the command name
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return b[i+2], nil
}

func waitGone(t testing.TB, pid int) {
	t.Helper()
	checkFor(t, 5*time.Second, func() error {
		if !processGone(pid) {
			return fmt.Errorf("process %d still running, want gone", pid)
		}
		return nil
	})
}

func readPid(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %s holds %q, want a pid", path, b)
	}
	return pid
}

func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		spec   exec.Spec
		code   string
		signal string
	}{
		{exec.Spec{Argv: []string{"true"}}, "0", ""},
		{exec.Spec{Argv: []string{"false"}}, "1", ""},
		{exec.Spec{Shell: "exit 3"}, "3", ""},
		{exec.Spec{Shell: "exit 255"}, "255", ""},
		{exec.Spec{Shell: "kill -9 $$"}, "nil", "SIGKILL"},
	} {
		res := run(t, tc.spec)
		if got := exitCode(res); got != tc.code || res.Signal != tc.signal || res.TimedOut || res.Canceled {
			t.Errorf("%q %q: exit %s, signal %q, timed out %v, canceled %v; want exit %s, signal %q",
				tc.spec.Argv, tc.spec.Shell, got, res.Signal, res.TimedOut, res.Canceled, tc.code, tc.signal)
		}
		if res.StartedAt.IsZero() || res.Duration <= 0 {
			t.Errorf("%q %q: StartedAt %v, Duration %v, want both set", tc.spec.Argv, tc.spec.Shell, res.StartedAt, res.Duration)
		}
	}
}

func TestRunSeparatesStdoutAndStderr(t *testing.T) {
	res := run(t, exec.Spec{Shell: "echo out; echo err >&2; echo more", Env: hostEnv()})
	if string(res.Stdout) != "out\nmore\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("stdout %q, stderr %q; want %q, %q", res.Stdout, res.Stderr, "out\nmore\n", "err\n")
	}
	if res.StdoutBytes != 9 || res.StderrBytes != 4 || res.StdoutTruncated || res.StderrTruncated {
		t.Fatalf("bytes %d/%d truncated %v/%v, want 9/4 false/false",
			res.StdoutBytes, res.StderrBytes, res.StdoutTruncated, res.StderrTruncated)
	}
}

func TestRunCapsAFlood(t *testing.T) {
	const total, max = 50_000_000, 1 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := run(t, exec.Spec{Shell: "yes | head -c 50000000", Env: hostEnv(), MaxOutput: max})
	runtime.ReadMemStats(&after)

	if res.StdoutBytes != total || !res.StdoutTruncated {
		t.Fatalf("StdoutBytes %d, truncated %v; want %d, true", res.StdoutBytes, res.StdoutTruncated, total)
	}
	if len(res.Stdout) < max || len(res.Stdout) > max+64 {
		t.Fatalf("len(Stdout) = %d, want %d plus a marker", len(res.Stdout), max)
	}
	if !bytes.HasPrefix(res.Stdout, []byte("y\ny\n")) || !bytes.HasSuffix(res.Stdout, []byte("y\ny\n")) {
		t.Fatalf("Stdout starts %q, ends %q; want y lines at both ends", res.Stdout[:8], res.Stdout[len(res.Stdout)-8:])
	}
	marker := fmt.Sprintf("\n[... %d bytes omitted ...]\n", total-max)
	if !bytes.Contains(res.Stdout, []byte(marker)) {
		t.Fatalf("Stdout lacks marker %q", marker)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("allocated %d bytes for a 50 MB flood, want under 16 MiB", alloc)
	}
}

func TestRunTimeoutKillsGroupThatIgnoresTERM(t *testing.T) {
	dir := t.TempDir()
	script := `trap "" TERM; sleep 1000 & echo $! > child.pid; echo $$ > shell.pid; echo started; sleep 1000`
	res := run(t, exec.Spec{Shell: script, Dir: dir, Env: hostEnv(),
		Timeout: 300 * time.Millisecond, Grace: 300 * time.Millisecond})

	if !res.TimedOut || res.Canceled || res.Signal != "SIGKILL" || res.ExitCode != nil {
		t.Fatalf("timed out %v, canceled %v, signal %q, exit %s; want true, false, SIGKILL, nil",
			res.TimedOut, res.Canceled, res.Signal, exitCode(res))
	}
	if string(res.Stdout) != "started\n" {
		t.Fatalf("Stdout %q, want the output so far %q", res.Stdout, "started\n")
	}
	if res.Duration < 600*time.Millisecond {
		t.Fatalf("Duration %v, want at least timeout+grace (600ms)", res.Duration)
	}
	waitGone(t, readPid(t, filepath.Join(dir, "shell.pid")))
	waitGone(t, readPid(t, filepath.Join(dir, "child.pid")))
}

// The leader obeys SIGTERM at once but leaves a child that ignores it: the
// child must not wait out the grace period, nor survive the run.
func TestRunTimeoutKillsChildThatIgnoresTERM(t *testing.T) {
	dir := t.TempDir()
	script := `(trap "" TERM; exec sleep 1000) & echo $! > child.pid; sleep 1000`
	res := run(t, exec.Spec{Shell: script, Dir: dir, Env: hostEnv(),
		Timeout: 200 * time.Millisecond, Grace: 8 * time.Second})

	if !res.TimedOut || res.Signal != "SIGTERM" || res.ExitCode != nil {
		t.Fatalf("timed out %v, signal %q, exit %s; want true, SIGTERM, nil", res.TimedOut, res.Signal, exitCode(res))
	}
	if res.Duration > 4*time.Second {
		t.Fatalf("Duration %v, want well under the 8 s grace", res.Duration)
	}
	waitGone(t, readPid(t, filepath.Join(dir, "child.pid")))
}

func TestRunKillsBackgroundChildAfterLeaderExits(t *testing.T) {
	// The child keeps stdout open: Run must neither wait for it nor leave it.
	res := run(t, exec.Spec{Shell: "sleep 1000 & echo $!", Env: hostEnv()})
	if exitCode(res) != "0" || res.TimedOut {
		t.Fatalf("exit %s, timed out %v; want 0, false", exitCode(res), res.TimedOut)
	}
	if res.Duration > 2*time.Second {
		t.Fatalf("Duration %v, want the run to end with its leader", res.Duration)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("Stdout %q, want the child's pid", res.Stdout)
	}
	waitGone(t, pid)
}

// A process that left the group cannot be killed by Run, but it must not
// keep Run waiting for an EOF on stdout either.
func TestRunDoesNotWaitForEscapedProcess(t *testing.T) {
	dir := t.TempDir()
	// The leader waits until the escape has happened, or the group kill
	// could catch the process before it calls setsid.
	script := `setsid sh -c 'echo $$ > esc.pid; exec sleep 1000' & while [ ! -s esc.pid ]; do sleep 0.01; done`
	res := run(t, exec.Spec{Shell: script, Dir: dir, Env: hostEnv()})
	pid := readPid(t, filepath.Join(dir, "esc.pid"))
	t.Cleanup(func() { unix.Kill(pid, unix.SIGKILL) })
	if exitCode(res) != "0" || res.Duration > 5*time.Second {
		t.Fatalf("exit %s, Duration %v; want 0 and a bounded drain", exitCode(res), res.Duration)
	}
	if processGone(pid) {
		t.Fatalf("escaped process %d is gone; the test did not exercise an escape", pid)
	}
}

func TestRunContextCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancel once the command is surely running.
		for {
			if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
				cancel()
				return
			}
			if ctx.Err() != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	res, err := exec.Run(ctx, exec.Spec{Shell: "echo hi; touch started; sleep 1000", Dir: dir, Env: hostEnv(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("Run error: %v", err)
	}
	if !res.Canceled || res.TimedOut || res.Signal != "SIGTERM" || res.ExitCode != nil {
		t.Fatalf("canceled %v, timed out %v, signal %q, exit %s; want true, false, SIGTERM, nil",
			res.Canceled, res.TimedOut, res.Signal, exitCode(res))
	}
	if string(res.Stdout) != "hi\n" {
		t.Fatalf("Stdout %q, want %q", res.Stdout, "hi\n")
	}
}

func TestRunContextAlreadyCanceledStartsNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := exec.Run(ctx, exec.Spec{Shell: "touch ran", Dir: dir})
	if err != nil || !res.Canceled || res.ExitCode != nil {
		t.Fatalf("Run = canceled %v, exit %s, err %v; want true, nil, nil", res.Canceled, exitCode(res), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat ran: %v, want not exist: the command must not have run", err)
	}
}

func TestRunStartFailures(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec exec.Spec
		want error
	}{
		{"not found", exec.Spec{Argv: []string{"no-such-program-avfs"}}, osexec.ErrNotFound},
		{"not executable", exec.Spec{Argv: []string{noexec}}, fs.ErrPermission},
		{"bad dir", exec.Spec{Argv: []string{"true"}, Dir: filepath.Join(dir, "missing")}, fs.ErrNotExist},
	} {
		res, err := exec.Run(context.Background(), tc.spec)
		if !errors.Is(err, exec.ErrStart) || !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want ErrStart wrapping %v", tc.name, err, tc.want)
		}
		if res.StartedAt.IsZero() || res.ExitCode != nil {
			t.Errorf("%s: StartedAt %v, exit %s; want set, nil", tc.name, res.StartedAt, exitCode(res))
		}
	}
}

func TestRunInvalidSpec(t *testing.T) {
	for _, s := range []exec.Spec{
		{},
		{Argv: []string{"true"}, Shell: "true"},
		{Argv: []string{""}},
		{Argv: []string{"true"}, Dir: "relative"},
		{Argv: []string{"true"}, Timeout: -1},
		{Argv: []string{"true"}, MaxOutput: -1},
	} {
		if _, err := exec.Run(context.Background(), s); !errors.Is(err, exec.ErrInvalidSpec) {
			t.Errorf("Run(%+v) err = %v, want ErrInvalidSpec", s, err)
		}
	}
}

func TestRunStdinNilIsClosed(t *testing.T) {
	res := run(t, exec.Spec{Argv: []string{"cat"}})
	if exitCode(res) != "0" || len(res.Stdout) != 0 || res.TimedOut {
		t.Fatalf("exit %s, stdout %q, timed out %v; want 0, empty, false", exitCode(res), res.Stdout, res.TimedOut)
	}
}

func TestRunStdinIsFed(t *testing.T) {
	res := run(t, exec.Spec{Argv: []string{"cat"}, Stdin: strings.NewReader("hello\nworld\n")})
	if string(res.Stdout) != "hello\nworld\n" {
		t.Fatalf("Stdout %q, want the input echoed", res.Stdout)
	}
}

// Stdin larger than a pipe buffer is fed while output is drained.
func TestRunLargeStdin(t *testing.T) {
	in := bytes.Repeat([]byte("0123456789"), 500_000)
	res := run(t, exec.Spec{Argv: []string{"wc", "-c"}, Stdin: bytes.NewReader(in)})
	if got := strings.TrimSpace(string(res.Stdout)); got != "5000000" {
		t.Fatalf("wc -c = %q, want 5000000", got)
	}
	// A command that reads nothing still ends normally.
	res = run(t, exec.Spec{Argv: []string{"true"}, Stdin: bytes.NewReader(in)})
	if exitCode(res) != "0" {
		t.Fatalf("exit %s, want 0", exitCode(res))
	}
}

// A stdin reader that never returns must not hold Run past the leader's exit.
func TestRunStdinBlockedReaderDoesNotHang(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() }) // releases os/exec's copying goroutine
	res := run(t, exec.Spec{Argv: []string{"true"}, Stdin: pr})
	if exitCode(res) != "0" || res.Duration > 5*time.Second {
		t.Fatalf("exit %s, Duration %v; want 0 and a bounded wait", exitCode(res), res.Duration)
	}
}

func TestRunDir(t *testing.T) {
	dir := t.TempDir()
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, exec.Spec{Argv: []string{"pwd"}, Dir: dir})
	if got := strings.TrimSpace(string(res.Stdout)); got != want {
		t.Fatalf("pwd = %q, want %q", got, want)
	}
}

func TestRunEnvIsExactlyAsGiven(t *testing.T) {
	t.Setenv("AVFS_WORKER_SECRET", "leak")
	res := run(t, exec.Spec{Argv: []string{"env"}, Env: []string{"B=2", "A=1"}})
	if got, want := string(res.Stdout), "B=2\nA=1\n"; got != want {
		t.Fatalf("env printed %q, want %q", got, want)
	}
	res = run(t, exec.Spec{Argv: []string{"env"}})
	if len(res.Stdout) != 0 {
		t.Fatalf("env with nil Env printed %q, want nothing", res.Stdout)
	}
}

// The program is looked up along the command's PATH, not the worker's.
func TestRunLooksUpProgramInSpecPath(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "avfs-tool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := run(t, exec.Spec{Argv: []string{"avfs-tool"}, Env: []string{"PATH=" + bin}})
	if string(res.Stdout) != "tool ran\n" {
		t.Fatalf("Stdout %q, want %q", res.Stdout, "tool ran\n")
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	if _, err := exec.Run(context.Background(), exec.Spec{Argv: []string{"avfs-tool"}, Env: []string{"PATH=/usr/bin:/bin"}}); !errors.Is(err, exec.ErrStart) {
		t.Fatalf("Run with the tool only on the worker's PATH: err = %v, want ErrStart", err)
	}
}

func TestEnterDirChangesDirectoryAfterStart(t *testing.T) {
	dir := t.TempDir()
	res, err := exec.Run(context.Background(), exec.Spec{Argv: []string{"pwd"}, Dir: dir, EnterDir: true, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != dir {
		t.Fatalf("pwd = %q, want %q", got, dir)
	}
	if _, err := exec.Run(context.Background(), exec.Spec{Argv: []string{"no-such-program-avfs"}, Dir: dir, EnterDir: true, Env: []string{"PATH=/usr/bin:/bin"}}); !errors.Is(err, exec.ErrStart) {
		t.Fatalf("missing program with EnterDir: %v, want ErrStart", err)
	}
}

// chanWriter reports each write on a channel; safe for one writer.
type chanWriter chan string

func (c chanWriter) Write(p []byte) (int, error) { c <- string(p); return len(p), nil }

func TestRunTeesOutputWhileTheCommandRuns(t *testing.T) {
	out, errw := make(chanWriter, 16), make(chanWriter, 16)
	done := make(chan exec.Result, 1)
	gate := filepath.Join(t.TempDir(), "gate")
	go func() {
		// The command waits for a file the test creates only after it saw
		// the first line: a tee that delivered at the end would deadlock
		// until the timeout.
		res, _ := exec.Run(context.Background(), exec.Spec{Shell: "echo a; echo e >&2; while [ ! -e " + gate + " ]; do sleep 0.01; done; echo b",
			Env: hostEnv(), Timeout: 10 * time.Second, Stdout: out, Stderr: errw})
		done <- res
	}()
	if got := <-out; got != "a\n" {
		t.Fatalf("first stdout chunk %q, want a", got)
	}
	if got := <-errw; got != "e\n" {
		t.Fatalf("first stderr chunk %q, want e", got)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if got := <-out; got != "b\n" {
		t.Fatalf("second stdout chunk %q, want b", got)
	}
	if string(res.Stdout) != "a\nb\n" || string(res.Stderr) != "e\n" {
		t.Fatalf("captured %q / %q", res.Stdout, res.Stderr)
	}
}

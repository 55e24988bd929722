package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

// avfsCmd runs the avfs binary on home and returns its stdout.
func avfsCmd(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	// The exec keeper would outlive the test: execs run in the CLI.
	cmd.Env = append(os.Environ(), "AVFS_HOME="+home, "AVFS_VAULT=", "AVFS_EXEC_KEEPER=false")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("avfs %v: %v\n%s%s", args, err, out, stderr)
	}
	return string(out)
}

// mountedAt reports whether dir is on another device than its parent.
func mountedAt(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// within polls fn for at most d.
func within(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	poll.Until(t, d, what, func() (bool, error) {
		err := fn()
		return err == nil, err
	})
}

func contentIs(p, want string) func() error {
	return func() error {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if string(b) != want {
			return fmt.Errorf("%s: %q, want %q", p, b, want)
		}
		return nil
	}
}

// TestMountAcrossProcesses is the scenario with real processes:
// `avfs mount` runs while other avfs processes write, exec and restore on
// the same home; the mount shows each change within a second. Killed
// with SIGKILL, it leaves a dead mount that `avfs unmount` clears.
func TestMountAcrossProcesses(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	avfsCmd(t, home, "vault", "create", "s")
	avfsCmd(t, home, "--vault", "s", "write", "/a.txt", "one")
	mnt := exec.Command(binary(t), "--vault", "s", "mount", dir)
	mnt.Env = append(os.Environ(), "AVFS_HOME="+home)
	mnt.Stderr = os.Stderr
	if err := mnt.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { mnt.Wait(); close(exited) }()
	t.Cleanup(func() {
		mnt.Process.Kill()
		<-exited
		syscall.Unmount(dir, syscall.MNT_DETACH)
	})
	within(t, 10*time.Second, "mount up", func() error {
		if !mountedAt(dir) {
			return errors.New("not mounted")
		}
		return nil
	})
	// The kernel caches the listing, a.txt and the miss on b.txt.
	if err := contentIs(filepath.Join(dir, "a.txt"), "one")(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b.txt before: %v", err)
	}
	avfsCmd(t, home, "--vault", "s", "write", "/b.txt", "two")
	avfsCmd(t, home, "--vault", "s", "write", "/a.txt", "changed")
	within(t, time.Second, "write by another process", contentIs(filepath.Join(dir, "b.txt"), "two"))
	within(t, time.Second, "overwrite by another process", contentIs(filepath.Join(dir, "a.txt"), "changed"))

	avfsCmd(t, home, "--vault", "s", "checkpoint", "save", "before")
	avfsCmd(t, home, "--vault", "s", "exec", "--", "sh", "-c", "echo made > by-exec.txt")
	within(t, time.Second, "file created by exec", contentIs(filepath.Join(dir, "by-exec.txt"), "made\n"))
	avfsCmd(t, home, "--vault", "s", "checkpoint", "restore", "before")
	within(t, time.Second, "restore", func() error {
		es, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var got []string
		for _, e := range es {
			got = append(got, e.Name())
		}
		if strings.Join(got, " ") != "a.txt b.txt" {
			return fmt.Errorf("ls: %q", got)
		}
		return nil
	})

	// A write through the mount reaches the others.
	if err := os.WriteFile(filepath.Join(dir, "c.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the mount's write seen by avfs cat", func() error {
		cmd := exec.Command(binary(t), "--vault", "s", "cat", "/c.txt")
		cmd.Env = append(os.Environ(), "AVFS_HOME="+home)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "mine") {
			return fmt.Errorf("cat: %q, %v", out, err)
		}
		return nil
	})

	// SIGKILL leaves a dead mount: every access is ENOTCONN until
	// `avfs unmount` clears it.
	mnt.Process.Kill()
	<-exited
	if _, err := os.Stat(dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat after SIGKILL: %v, want ENOTCONN", err)
	}
	avfsCmd(t, home, "unmount", dir)
	if _, err := os.Stat(dir); err != nil || mountedAt(dir) {
		t.Fatalf("after avfs unmount: %v, mounted %v", err, mountedAt(dir))
	}
}

// TestFleetMount: `avfs --nats URL mount DIR` of a fleet vault (which no
// local store holds) asks the owner to serve it. Writes through the
// mount reach the fleet, and the fleet's writes and execs show in the
// mount; `avfs unmount` ends it and the mounting command with it.
func TestFleetMount(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "fv", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "default", "fv", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("one")}, nil); err != nil {
		t.Fatal(err)
	}
	home, dir := t.TempDir(), t.TempDir()
	mnt := exec.Command(binary(t), "--nats", f.url, "--vault", "fv", "mount", dir)
	mnt.Env = append(os.Environ(), "AVFS_HOME="+home)
	mnt.Stderr = os.Stderr
	if err := mnt.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- mnt.Wait() }()
	t.Cleanup(func() {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		mnt.Process.Kill()
	})
	within(t, 15*time.Second, "fleet mount up", func() error {
		if !mountedAt(dir) {
			return errors.New("not mounted")
		}
		return nil
	})
	within(t, time.Second, "content of the fleet's vault", contentIs(filepath.Join(dir, "a.txt"), "one"))
	if err := os.WriteFile(filepath.Join(dir, "m.txt"), []byte("through the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	var cat messages.CatResult
	if err := c.Call(ctx, "default", "fv", messages.OpCat, messages.PathArgs{Path: "/m.txt"}, &cat); err != nil || cat.Content == nil || *cat.Content != "through the mount" {
		t.Fatalf("the mount's write through the fleet: %+v, %v", cat, err)
	}
	if err := c.Call(ctx, "default", "fv", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("changed")}, nil); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "the fleet's write in the mount", contentIs(filepath.Join(dir, "a.txt"), "changed"))
	if _, err := c.Exec(ctx, "default", "fv", messages.ExecArgs{Shell: "echo run > by-exec.txt"}); err != nil {
		t.Fatal(err)
	}
	within(t, time.Second, "exec through the fleet", contentIs(filepath.Join(dir, "by-exec.txt"), "run\n"))

	avfsCmd(t, home, "unmount", dir)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("avfs mount after unmount: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("avfs mount kept running after unmount")
	}
	if mountedAt(dir) {
		t.Fatal("still mounted")
	}
}

// TestMountWakesServersHere: on a kernel with the fuse module parameter
// wake_here (the kernel then wakes a mount's server on the CPU of the
// request), `avfs mount` sets it to Y at its mount and says so at log
// level info; with mount.wake_here=false it leaves the parameter alone.
// On a kernel without it, the mount works and touches nothing. The
// parameter is the machine's: the test puts back what it found.
func TestMountWakesServersHere(t *testing.T) {
	const param = "/sys/module/fuse/parameters/wake_here"
	was, err := os.ReadFile(param)
	have := err == nil
	if have {
		t.Cleanup(func() { os.WriteFile(param, was, 0) })
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	home := t.TempDir()
	avfsCmd(t, home, "vault", "create", "s")
	// mountOnce runs `avfs mount` until it is up, then unmounts it and
	// returns its log and the parameter as it was while mounted.
	mountOnce := func(env ...string) (log, value string) {
		t.Helper()
		if have {
			if err := os.WriteFile(param, []byte("N"), 0); err != nil {
				t.Fatal(err)
			}
		}
		dir := t.TempDir()
		var stderr bytes.Buffer
		mnt := exec.Command(binary(t), "--log-level", "info", "--vault", "s", "mount", dir)
		mnt.Env = append(append(os.Environ(), "AVFS_HOME="+home), env...)
		mnt.Stderr = &stderr
		if err := mnt.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- mnt.Wait() }()
		within(t, 10*time.Second, "mount up", func() error {
			if !mountedAt(dir) {
				return errors.New("not mounted")
			}
			return nil
		})
		if have {
			b, err := os.ReadFile(param)
			if err != nil {
				t.Fatal(err)
			}
			value = strings.TrimSpace(string(b))
		}
		avfsCmd(t, home, "unmount", dir)
		if err := <-exited; err != nil {
			t.Fatalf("avfs mount: %v\n%s", err, stderr.String())
		}
		return stderr.String(), value
	}

	log, value := mountOnce()
	switch {
	case !have:
		if strings.Contains(log, "wake_here") {
			t.Errorf("a kernel without wake_here: avfs mount logged about it:\n%s", log)
		}
	case value != "Y":
		t.Errorf("wake_here while avfs mount served: %q, want Y", value)
	case !strings.Contains(log, "wake_here set to Y"):
		t.Errorf("avfs mount did not say it set wake_here:\n%s", log)
	}
	// Another process's first mount may set it meanwhile (go test runs
	// packages side by side); this one's log says whether it did.
	if log, _ := mountOnce("AVFS_MOUNT_WAKE_HERE=false"); strings.Contains(log, "wake_here") {
		t.Errorf("mount.wake_here=false: avfs mount touched wake_here:\n%s", log)
	}
}

package exec_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/avfs/avfs/exec"
)

// sandboxed runs shell in a sandbox that binds the system and a fresh
// workspace, the way the worker does; it returns the result and the
// workspace.
func sandboxed(t *testing.T, shell string, tune func(*exec.Sandbox)) (exec.Result, string) {
	t.Helper()
	ws := t.TempDir()
	sb := &exec.Sandbox{Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
	if tune != nil {
		tune(sb)
	}
	return run(t, exec.Spec{Shell: shell, Dir: ws, Env: hostEnv(), Sandbox: sb}), ws
}

// eachMode runs fn with a one-shot sandbox init per command ("init") and
// with a pool of kept inits ("zygote"); tune sets the mode on a Sandbox.
func eachMode(t *testing.T, fn func(t *testing.T, mode func(*exec.Sandbox))) {
	t.Run("init", func(t *testing.T) { fn(t, func(*exec.Sandbox) {}) })
	t.Run("zygote", func(t *testing.T) {
		p := exec.NewPool()
		t.Cleanup(p.Close)
		fn(t, func(sb *exec.Sandbox) { sb.Pool = p })
	})
}

// both applies two tunings.
func both(a, b func(*exec.Sandbox)) func(*exec.Sandbox) {
	return func(sb *exec.Sandbox) {
		a(sb)
		if b != nil {
			b(sb)
		}
	}
}

// hostSecret places a file in a host directory the sandbox does not bind
// (/root, as an operator's home would be) and returns its path.
func hostSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join("/root", fmt.Sprintf(".avfs-sandbox-secret-%d", os.Getpid()))
	if err := os.WriteFile(p, []byte("host secret\n"), 0o600); err != nil {
		t.Fatalf("place the secret: %v", err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// Every way out of the workspace that a command might try ends in an
// error the command sees, and the host is left as it was.
func TestSandboxEscapesFail(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		secret := hostSecret(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0") // stands in for the fleet's NATS port
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- struct{}{}
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		victim := osexec.Command("sleep", "60")
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { victim.Process.Kill(); victim.Wait() }()
		outside := filepath.Join(t.TempDir(), "written-from-the-sandbox")

		// Each step prints "LABEL ok" only if the escape worked.
		steps := []struct{ label, cmd string }{
			{"read-secret", "cat " + secret},
			{"list-root", "ls /root | grep -q sandbox-secret"},
			{"symlink", "ln -s " + secret + " link && cat link"},
			{"proc1-root", "cat /proc/1/root" + secret},
			{"dotdot", "cat ../../../../../../.." + secret},
			{"write-usr", "echo x > /usr/avfs-escape"},
			{"write-etc", "echo x > /etc/avfs-escape"},
			{"write-outside", "echo x > " + outside},
			{"connect", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d", port)},
			{"connect-out", "exec 3<>/dev/tcp/10.255.255.1/9"},
			{"kill", fmt.Sprintf("kill -9 %d", victim.Process.Pid)},
			// strace still running half a second later has attached.
			{"ptrace", fmt.Sprintf("strace -p %d -o /dev/null & sleep 0.5; kill -0 $!", victim.Process.Pid)},
			// The sandbox's own init (kept or not) is out of reach too.
			{"init-fds", "for f in /proc/1/fd/*; do readlink $f; done | grep -q ."},
			{"init-root", "ls /proc/1/root/ | grep -q ."},
			{"init-mem", "head -c 1 /proc/1/mem | grep -q ."},
			{"init-environ", "grep -q AVFS /proc/1/environ"},
			{"init-ptrace", "strace -p 1 -o /dev/null & sleep 0.5; kill -0 $!"},
			{"init-kill", "kill -KILL 1 && sleep 0.2 && ! kill -0 1"},
			{"mount", "mount -t tmpfs none /tmp"},
			{"unshare-user", "unshare -r true"},
			{"unshare-mount", "unshare -m true"},
			{"chroot", "chroot / true"},
			{"sysctl", "echo 1 > /proc/sys/vm/drop_caches"},
		}
		var script strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&script, "if ( %s ) >/dev/null 2>%s.err; then echo '%s ok'; else echo \"%s refused: $(head -c 200 %s.err | tr '\\n' ' ')\"; fi\n",
				s.cmd, s.label, s.label, s.label, s.label)
		}
		res, ws := sandboxed(t, "bash -c "+shellQuote(script.String()), mode)
		t.Logf("inside the sandbox:\n%s%s", res.Stdout, res.Stderr)
		if exitCode(res) != "0" {
			t.Fatalf("script exit %s, signal %q: %s", exitCode(res), res.Signal, res.Stderr)
		}
		for _, s := range steps {
			if strings.Contains(string(res.Stdout), s.label+" ok") {
				t.Errorf("%s: escaped the sandbox (%s)", s.label, s.cmd)
			} else if !strings.Contains(string(res.Stdout), s.label+" refused: ") {
				t.Errorf("%s: no verdict in the output", s.label)
			}
		}
		// The host saw none of it.
		for _, p := range []string{"/usr/avfs-escape", "/etc/avfs-escape", outside} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists on the host: %v", p, err)
			}
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(victim.Process.Pid) + "/stat"); err != nil || strings.Contains(string(b), ") Z ") {
			t.Errorf("the host process was killed: %q %v", b, err)
		}
		select {
		case <-accepted:
			t.Error("the listener on 127.0.0.1 got a connection from the sandbox")
		default:
		}
		// What was refused is reported, counted.
		got := map[string]int{}
		for _, r := range res.Refused {
			got[r.Kind+" "+r.Call+" "+r.Target] = r.Count
		}
		for _, want := range []string{"syscall mount ", "syscall unshare ", "syscall chroot ", "syscall ptrace ", "network connect 10.255.255.1:9"} {
			if got[want] == 0 {
				t.Errorf("refusals %+v lack %q", res.Refused, want)
			}
		}
		if got["syscall unshare "] < 2 {
			t.Errorf("two unshare attempts counted %d times", got["syscall unshare "])
		}
		// What the command was allowed to do reached the workspace.
		if _, err := os.Lstat(filepath.Join(ws, "link")); err != nil {
			t.Errorf("the symlink made in the workspace is not in it: %v", err)
		}
	})
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Network granted: the same listener is reached.
func TestSandboxNetworkGranted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	res, _ := sandboxed(t, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; cat <&3'", port), func(sb *exec.Sandbox) { sb.Network = true })
	if exitCode(res) != "0" || string(res.Stdout) != "hello from the host\n" {
		t.Fatalf("exit %s, stdout %q, stderr %q; want the listener's greeting", exitCode(res), res.Stdout, res.Stderr)
	}
	// Without it, only the sandbox's own loopback exists, and it works.
	res, _ = sandboxed(t, "bash -c 'python3 -m http.server -b 127.0.0.1 8765 >/dev/null 2>&1 & for i in $(seq 100); do exec 3<>/dev/tcp/127.0.0.1/8765 && break; sleep 0.05; done 2>/dev/null; printf \"GET / HTTP/1.0\\r\\n\\r\\n\" >&3; head -1 <&3'", nil)
	if !strings.HasPrefix(string(res.Stdout), "HTTP/1.0 200") {
		t.Fatalf("own loopback: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// The command's status comes through the init unchanged, and nothing it
// started outlives it, not even a process in a session of its own.
func TestSandboxStatusAndCleanup(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		res, _ := sandboxed(t, "exit 3", mode)
		if exitCode(res) != "3" || res.Signal != "" {
			t.Errorf("exit 3: got exit %s signal %q", exitCode(res), res.Signal)
		}
		res, _ = sandboxed(t, "kill -TERM $$", mode)
		if res.ExitCode != nil || res.Signal != "SIGTERM" {
			t.Errorf("kill -TERM $$: got exit %s signal %q", exitCode(res), res.Signal)
		}
		marker := fmt.Sprintf("%d.%d", 1000+os.Getpid()%1000, time.Now().UnixNano()%1000)
		res, _ = sandboxed(t, "setsid sleep "+marker+" >/dev/null 2>&1 < /dev/null & echo started", mode)
		if string(res.Stdout) != "started\n" {
			t.Fatalf("stdout %q, stderr %q", res.Stdout, res.Stderr)
		}
		checkFor(t, 5*time.Second, func() error {
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), marker) {
					return fmt.Errorf("pid %s (setsid sleep %s) outlived its sandbox", e.Name(), marker)
				}
			}
			return nil
		})

		// A timeout gets SIGTERM to the command, as without a sandbox.
		ws := t.TempDir()
		sb := &exec.Sandbox{Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
		mode(sb)
		res = run(t, exec.Spec{Shell: "sleep 30", Dir: ws, Env: hostEnv(), Timeout: 300 * time.Millisecond, Sandbox: sb})
		if !res.TimedOut || res.Signal != "SIGTERM" {
			t.Errorf("timeout: timed out %v, signal %q, exit %s; want SIGTERM", res.TimedOut, res.Signal, exitCode(res))
		}
	})
}

// A timeout that expires while the sandbox's init is still starting ends
// the command by a signal, not with the exit status the init died with.
// Which signal depends on when it came: one before the Go runtime handles
// signals is dropped (the init is PID 1), and the grace period's SIGKILL
// ends the command; one after it ends the init (reported as SIGTERM).
func TestSandboxTimeoutDuringStart(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		ws := t.TempDir()
		sb := &exec.Sandbox{Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
		mode(sb)
		for _, timeout := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond} {
			res := run(t, exec.Spec{Shell: "sleep 30", Dir: ws, Env: hostEnv(), Timeout: timeout, Grace: 200 * time.Millisecond, Sandbox: sb})
			if !res.TimedOut || res.Signal == "" || res.ExitCode != nil {
				t.Errorf("timeout %v: timed out %v, signal %q, exit %s; want a timeout ended by a signal",
					timeout, res.TimedOut, res.Signal, exitCode(res))
			}
		}
	})
}

// A program that is not there fails to start, as without a sandbox; a
// bind that cannot be made is a sandbox error, and nothing runs.
func TestSandboxStartErrors(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		ws := t.TempDir()
		sb := &exec.Sandbox{Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
		mode(sb)
		_, err := exec.Run(context.Background(), exec.Spec{Argv: []string{ws + "/missing"}, Dir: ws, Env: hostEnv(), Sandbox: sb})
		if !errors.Is(err, exec.ErrStart) || errors.Is(err, exec.ErrSandbox) || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("missing program: %v", err)
		}
		sb.Binds = append(sb.Binds, exec.Bind{Path: "relative/path"})
		_, err = exec.Run(context.Background(), exec.Spec{Shell: "touch ran", Dir: ws, Env: hostEnv(), Sandbox: sb})
		if !errors.Is(err, exec.ErrSandbox) || !strings.Contains(err.Error(), "relative/path") {
			t.Errorf("bad bind: %v", err)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
			t.Error("the command ran although its sandbox could not be built")
		}
	})
}

// Limits: a command beyond its memory is killed and says why; one that
// forks beyond its process count is refused forks and says so.
func TestSandboxLimits(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		res, _ := sandboxed(t, "exec python3 -c 'b = bytearray(512 << 20); print(len(b))'", both(mode, func(sb *exec.Sandbox) {
			sb.Limits.MemoryBytes = 64 << 20
		}))
		if res.Signal != "SIGKILL" || res.Limit != exec.LimitMemory {
			t.Errorf("memory: exit %s, signal %q, limit %q, stdout %q, stderr %q; want SIGKILL by the memory limit",
				exitCode(res), res.Signal, res.Limit, res.Stdout, res.Stderr)
		}
		res, _ = sandboxed(t, "for i in $(seq 40); do sleep 5 & done 2>/dev/null; kill $(jobs -p) 2>/dev/null; exit 0", both(mode, func(sb *exec.Sandbox) {
			sb.Limits.Pids = 10
		}))
		if res.Limit != exec.LimitPids {
			t.Errorf("pids: exit %s, limit %q, stderr %q; want the pids limit", exitCode(res), res.Limit, res.Stderr)
		}
		// A tenth of a CPU: a second of busy looping gets at most about a
		// tenth of a second of CPU time (less when the machine is busy).
		res, _ = sandboxed(t, "exec python3 -c 'import time\nt = time.time()\nwhile time.time() - t < 1: pass\nprint(time.process_time())'", both(mode, func(sb *exec.Sandbox) {
			sb.Limits.CPUs = 0.1
		}))
		if cpu, err := strconv.ParseFloat(strings.TrimSpace(string(res.Stdout)), 64); err != nil || cpu > 0.2 {
			t.Errorf("cpus 0.1: a 1 s busy loop used %q s of CPU (stderr %q), want at most ~0.1", res.Stdout, res.Stderr)
		}
		res, _ = sandboxed(t, "true", both(mode, func(sb *exec.Sandbox) { sb.Limits = exec.Limits{MemoryBytes: 256 << 20, Pids: 100, CPUs: 1} }))
		if exitCode(res) != "0" || res.Limit != "" {
			t.Errorf("within limits: exit %s, limit %q, stderr %q", exitCode(res), res.Limit, res.Stderr)
		}
	})
}

// BenchmarkTrue compares `true` run plainly and in a sandbox: the
// difference is the sandbox's setup cost (BENCHMARKS.md).
func BenchmarkTrue(b *testing.B) {
	ws := b.TempDir()
	pool := exec.NewPool()
	defer pool.Close()
	for _, bc := range []struct {
		name string
		sb   *exec.Sandbox
	}{
		{"none", nil},
		{"namespaces", &exec.Sandbox{Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}},
		{"namespaces+network", &exec.Sandbox{Network: true, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}},
		{"namespaces+zygote", &exec.Sandbox{Pool: pool, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// CPU time of the children (init and command) and of this
			// process: on a loaded machine wall time is mostly waiting.
			before, kept := cpuTime(), keptInitsCPU()
			for b.Loop() {
				res := run(b, exec.Spec{Argv: []string{"true"}, Dir: ws, Env: hostEnv(), Sandbox: bc.sb})
				if exitCode(res) != "0" {
					b.Fatalf("exit %s: %s", exitCode(res), res.Stderr)
				}
			}
			used := cpuTime() - before + keptInitsCPU() - kept
			b.ReportMetric(float64(used.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// A hidden path stays hidden under a bind that contains it (the worker's
// home under a bound directory), while the workspace bound below it shows.
func TestSandboxHide(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		shared := t.TempDir()
		home := filepath.Join(shared, "avfs-home")
		ws := filepath.Join(home, "mnt", "default", "v")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(home, "store.db"), []byte("other vaults"), 0o600)
		os.WriteFile(filepath.Join(shared, "tool.txt"), []byte("shared tool\n"), 0o644)
		sb := &exec.Sandbox{Hide: []string{home},
			Binds: append(exec.SystemBinds(), exec.Bind{Path: shared}, exec.Bind{Path: ws, Writable: true})}
		mode(sb)
		res := run(t, exec.Spec{Shell: "cat " + shared + "/tool.txt; ls " + home + "; echo ok > here; cat " + home + "/store.db",
			Dir: ws, Env: hostEnv(), Sandbox: sb})
		if string(res.Stdout) != "shared tool\nmnt\n" || !strings.Contains(string(res.Stderr), "store.db: No such file") {
			t.Fatalf("stdout %q, stderr %q; want the shared file, only mnt in the home, no store", res.Stdout, res.Stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "here")); string(b) != "ok\n" {
			t.Fatalf("the workspace under the hidden home did not get the write: %q", b)
		}
	})
}

// cpuTime is the user and system time of this process and its waited-for
// children so far.
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		unix.Getrusage(who, &ru)
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// keptInits lists this process's kept sandbox inits: children named
// avfs-sandbox that are still running.
func keptInits() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if f := strings.Fields(string(b[i+2:])); i < 0 || len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); strings.HasPrefix(string(cmd), "avfs-sandbox") {
			pid, _ := strconv.Atoi(e.Name())
			out = append(out, pid)
		}
	}
	return out
}

// keptInitsCPU is the CPU time of this process's kept inits and of the
// commands they reaped.
func keptInitsCPU() time.Duration {
	var total time.Duration
	for _, pid := range keptInits() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:])) // utime stime cutime cstime at 11..14
		if len(f) < 15 {
			continue
		}
		for _, x := range f[11:15] {
			n, _ := strconv.Atoi(x)
			total += time.Duration(n) * time.Second / 100 // clock ticks: USER_HZ is 100 on Linux
		}
	}
	return total
}

// The init's report cannot be forged by the command: the pipes it
// reports through are not inherited.
func TestSandboxReportNotForgeable(t *testing.T) {
	eachMode(t, func(t *testing.T, mode func(*exec.Sandbox)) {
		res, _ := sandboxed(t, "echo 'exit 0' >&4; echo 'exit 0' >&3; exit 7", mode)
		if exitCode(res) != "7" {
			t.Fatalf("exit %s, stderr %q; want the command's own 7", exitCode(res), res.Stderr)
		}
	})
}

// A kept init serves run after run of its layout, and each run starts
// clean: its own /tmp, /dev/shm and IPC namespace, nothing left running
// by the run before, and the workspace as it is now on the host, even
// when what is mounted there changed between runs (a vault remounted).
func TestZygoteRunsAreSeparate(t *testing.T) {
	pool := exec.NewPool()
	t.Cleanup(pool.Close)
	ws := t.TempDir()
	sb := &exec.Sandbox{Pool: pool, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
	first := run(t, exec.Spec{Shell: "echo left > /tmp/mark; echo left > /dev/shm/mark; ipcmk -M 4096 >/dev/null; ipcs -m | grep -c 0x; setsid sleep 300 </dev/null >/dev/null 2>&1 & echo ok",
		Dir: ws, Env: hostEnv(), Sandbox: sb})
	if string(first.Stdout) != "1\nok\n" {
		t.Fatalf("first run: stdout %q, stderr %q", first.Stdout, first.Stderr)
	}
	if pool.Idle() != 1 {
		t.Fatalf("%d idle inits after a run, want 1 kept", pool.Idle())
	}
	// No thread of the kept init keeps the run's mounts, the workspace's
	// (the vault's) among them, alive. The thread made ready for the next
	// run is in a mount namespace of its own, made after the run ended
	// (namespace ids are reused, so the mounts are what is compared).
	checkFor(t, 10*time.Second, func() error {
		for _, pid := range keptInits() {
			tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
			for _, task := range tasks {
				mi, err := os.ReadFile(task + "/mountinfo")
				if err != nil {
					continue // the thread has exited
				}
				for _, line := range strings.Split(string(mi), "\n") {
					if f := strings.Fields(line); len(f) > 4 && f[4] == ws {
						return fmt.Errorf("%s has the workspace mounted: %s", task, line)
					}
				}
			}
		}
		return nil
	})
	// Something else is mounted on the workspace now; the next run sees it.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "new.txt"), []byte("remounted\n"), 0o644)
	if err := unix.Mount(other, ws, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(ws, unix.MNT_DETACH) })
	second := run(t, exec.Spec{Shell: "cat /tmp/mark /dev/shm/mark 2>/dev/null; ls /dev/shm; ipcs -m | grep -c 0x; ps -e -o comm= | grep -c sleep; cat new.txt",
		Dir: ws, Env: hostEnv(), Sandbox: sb})
	if string(second.Stdout) != "0\n0\nremounted\n" {
		t.Errorf("second run: stdout %q, stderr %q; want nothing in /tmp, /dev/shm or shared memory, no sleep, the remounted workspace", second.Stdout, second.Stderr)
	}
	if pool.Idle() != 1 {
		t.Errorf("%d idle inits after two runs of one layout, want the same one kept", pool.Idle())
	}
}

// A kept init makes the next run's /tmp ahead, of the size the last run
// asked for; a run asking another size still gets a /tmp of its own size
// (and a fresh one: nothing of the run before).
func TestZygoteTmpSizePerRun(t *testing.T) {
	pool := exec.NewPool()
	t.Cleanup(pool.Close)
	ws := t.TempDir()
	size := func(tmp int64) string {
		sb := &exec.Sandbox{Pool: pool, TmpSize: tmp, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
		res := run(t, exec.Spec{Shell: "ls /tmp | grep -c mark; echo x > /tmp/mark; echo $(( $(stat -f -c '%b * %S' /tmp) ))", Dir: ws, Env: hostEnv(), Sandbox: sb})
		if exitCode(res) != "1" && exitCode(res) != "0" {
			t.Fatalf("exit %s, stderr %q", exitCode(res), res.Stderr)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	for i, tc := range []struct {
		tmp  int64
		want string
	}{
		{8 << 20, "0\n8388608"}, {8 << 20, "0\n8388608"}, {0, fmt.Sprintf("0\n%d", exec.DefaultTmpSize)}, {16 << 20, "0\n16777216"}, {0, fmt.Sprintf("0\n%d", exec.DefaultTmpSize)},
	} {
		if got := size(tc.tmp); got != tc.want {
			t.Errorf("run %d with TmpSize %d: marks left and /tmp size %q, want %q", i, tc.tmp, got, tc.want)
		}
	}
	if pool.Idle() != 1 {
		t.Errorf("%d idle inits, want the one kept init", pool.Idle())
	}
}

// Runs of one layout at the same time each get an init of their own.
func TestZygoteConcurrentRuns(t *testing.T) {
	pool := exec.NewPool()
	t.Cleanup(pool.Close)
	ws := t.TempDir()
	sb := &exec.Sandbox{Pool: pool, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
	// Each run waits until the other has written its file, so they overlap.
	results := make(chan exec.Result, 2)
	for _, me := range []string{"a", "b"} {
		other := map[string]string{"a": "b", "b": "a"}[me]
		go func() {
			res, err := exec.Run(context.Background(), exec.Spec{
				Shell: fmt.Sprintf("touch %s; for i in $(seq 600); do [ -e %s ] && exit 0; sleep 0.05; done; exit 1", me, other),
				Dir:   ws, Env: hostEnv(), Sandbox: sb, Timeout: time.Minute})
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	for range 2 {
		if res := <-results; exitCode(res) != "0" {
			t.Errorf("exit %s, stderr %q: the runs did not overlap", exitCode(res), res.Stderr)
		}
	}
	if n := pool.Idle(); n != 2 {
		t.Errorf("%d idle inits, want 2", n)
	}
}

// keptInitAfterARun runs one command in a sandbox of pool, writable at
// ws, and returns the pid of the one kept init it leaves.
func keptInitAfterARun(t *testing.T, pool *exec.Pool) (ws string, sb *exec.Sandbox, pid int) {
	t.Helper()
	ws = t.TempDir()
	sb = &exec.Sandbox{Pool: pool, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
	if res := run(t, exec.Spec{Shell: "echo one", Dir: ws, Env: hostEnv(), Sandbox: sb}); string(res.Stdout) != "one\n" {
		t.Fatalf("first run: %q %q", res.Stdout, res.Stderr)
	}
	inits := keptInits()
	if len(inits) != 1 {
		t.Fatalf("kept inits %v, want one", inits)
	}
	return ws, sb, inits[0]
}

// A kept init that died while idle (the OOM killer, an operator) is
// replaced: the next run starts a new one. Close ends every kept init.
func TestZygoteReplacedWhenDead(t *testing.T) {
	pool := exec.NewPool()
	ws, sb, pid := keptInitAfterARun(t, pool)
	unix.Kill(pid, unix.SIGKILL)
	checkFor(t, 10*time.Second, func() error {
		if !processGone(pid) {
			return fmt.Errorf("kept init %d still runs", pid)
		}
		return nil
	})
	if res := run(t, exec.Spec{Shell: "echo two", Dir: ws, Env: hostEnv(), Sandbox: sb}); string(res.Stdout) != "two\n" || exitCode(res) != "0" {
		t.Fatalf("run after the init died: exit %s, %q %q", exitCode(res), res.Stdout, res.Stderr)
	}
	pool.Close()
	checkFor(t, 10*time.Second, func() error {
		for _, pid := range keptInits() {
			if !processGone(pid) {
				return fmt.Errorf("kept init %d outlived Close", pid)
			}
		}
		return nil
	})
	// A closed pool's runs start an init of their own.
	if res := run(t, exec.Spec{Shell: "echo three", Dir: ws, Env: hostEnv(), Sandbox: sb}); string(res.Stdout) != "three\n" {
		t.Fatalf("run after Close: %q %q", res.Stdout, res.Stderr)
	}
}

// A kept init stopped while idle (SIGSTOP from an operator or a
// debugger) is not given the next run, which would then wait for its
// timeout: the run starts a new init, and the stopped one is killed.
func TestZygoteReplacedWhenStopped(t *testing.T) {
	pool := exec.NewPool()
	t.Cleanup(pool.Close)
	ws, sb, pid := keptInitAfterARun(t, pool)
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal stops it a moment later; one stopped while the run is
	// being handed over is not caught (the run then waits for its
	// timeout).
	checkFor(t, 10*time.Second, func() error {
		if state, err := processState(pid); err != nil || state != 'T' {
			return fmt.Errorf("kept init %d in state %q (%v), want stopped", pid, state, err)
		}
		return nil
	})
	res := run(t, exec.Spec{Shell: "echo two", Dir: ws, Env: hostEnv(), Sandbox: sb, Timeout: 10 * time.Second})
	if string(res.Stdout) != "two\n" || exitCode(res) != "0" || res.TimedOut {
		t.Fatalf("run after the init was stopped: exit %s, timed out %v, %q %q", exitCode(res), res.TimedOut, res.Stdout, res.Stderr)
	}
	checkFor(t, 10*time.Second, func() error {
		if !processGone(pid) {
			return fmt.Errorf("stopped init %d still there", pid)
		}
		return nil
	})
}

// A kept init killed from the host while a command runs in it: the run
// ends (no hang) with a status that says it was killed.
func TestZygoteKilledMidRun(t *testing.T) {
	pool := exec.NewPool()
	t.Cleanup(pool.Close)
	ws := t.TempDir()
	sb := &exec.Sandbox{Pool: pool, Binds: append(exec.SystemBinds(), exec.Bind{Path: ws, Writable: true})}
	type out struct {
		res exec.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := exec.Run(context.Background(), exec.Spec{
			Shell: "setsid sleep 300 </dev/null & echo x; touch started; sleep 300",
			Dir:   ws, Env: hostEnv(), Sandbox: sb, Timeout: 5 * time.Minute})
		done <- out{res, err}
	}()
	checkFor(t, 30*time.Second, func() error {
		_, err := os.Stat(filepath.Join(ws, "started"))
		return err
	})
	inits := keptInits()
	if len(inits) != 1 {
		t.Fatalf("kept inits %v, want one", inits)
	}
	unix.Kill(inits[0], unix.SIGKILL)
	select {
	case o := <-done:
		if o.err != nil || o.res.ExitCode != nil || o.res.Signal != "SIGKILL" || string(o.res.Stdout) != "x\n" {
			t.Fatalf("run whose init was killed: err %v, exit %s, signal %q, stdout %q; want killed, its output kept", o.err, exitCode(o.res), o.res.Signal, o.res.Stdout)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end within 60 s of its kept init being killed")
	}
	if res := run(t, exec.Spec{Shell: "echo two", Dir: ws, Env: hostEnv(), Sandbox: sb}); string(res.Stdout) != "two\n" {
		t.Fatalf("run after: %q %q", res.Stdout, res.Stderr)
	}
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fmt"
	"github.com/avfs/avfs/cli"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/internal/terminal"
	"github.com/avfs/avfs/messages"
)

// TestExecOutputStreamsThroughTheFleet: the output of an exec reaches
// the caller while the command runs, and adds up to the envelope's.
func TestExecOutputStreamsThroughTheFleet(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	// The first line comes while the command still sleeps: output that
	// came with the reply would arrive with it.
	var mu sync.Mutex
	var stdout, stderr bytes.Buffer
	var seqs []int64
	var firstAt time.Time
	req := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "v"}
	req.Args, _ = json.Marshal(messages.ExecArgs{Timeout: "30s",
		Shell: "echo first; sleep 3; for i in 1 2 3; do echo line $i; echo warn $i >&2; done"})
	rep, err := c.DoOutput(ctx, req, func(ch messages.OutputChunk) {
		mu.Lock()
		defer mu.Unlock()
		seqs = append(seqs, ch.Seq)
		if firstAt.IsZero() {
			firstAt = time.Now()
		}
		if ch.Stream == messages.StreamStderr {
			stderr.Write(ch.Data)
			return
		}
		stdout.Write(ch.Data)
	})
	if early := time.Since(firstAt); early < time.Second {
		t.Fatalf("the first line arrived %s before the reply, not while the command slept 3 s", early)
	}
	if err != nil || rep.Error != nil {
		t.Fatalf("exec: %v %v", err, rep.Error)
	}
	var env messages.Envelope
	if err := json.Unmarshal(rep.Result, &env); err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusCompleted {
		t.Fatalf("status %s", env.Status)
	}
	if stdout.String() != env.Stdout || stderr.String() != env.Stderr {
		t.Fatalf("streamed %q / %q, envelope %q / %q", stdout.String(), stderr.String(), env.Stdout, env.Stderr)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("chunk seqs %v, want 1, 2, ...", seqs)
		}
	}
}

// TestBackgroundRunLifecycle: a run started by one CLI invocation runs
// on in the worker; its log is read by cursor while it runs, waited for,
// and its envelope is kept; a long run is killed with its process group.
func TestBackgroundRunLifecycle(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	c := f.client()
	ctx := context.Background()
	if out, code := f.avfsCLI("vault", "create", "v"); code != 0 {
		t.Fatalf("create: %s", out)
	}
	start := func(shell string) messages.RunInfo {
		t.Helper()
		out, code := f.avfsCLI("exec", "--vault", "v", "--detach", "--shell", shell)
		var r messages.RunResult
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Run.ID == "" || r.Run.State != messages.RunRunning {
			t.Fatalf("exec --detach: exit %d: %s", code, out)
		}
		return r.Run
	}
	// The CLI that started the run has returned (its connection is
	// closed); the run goes on in the worker.
	run := start("echo tick 1; sleep 3; for i in 2 3 4; do echo tick $i; echo oops $i >&2; done")

	var stdout, stderr bytes.Buffer
	read := func(id string, since int64) messages.RunLogsResult {
		t.Helper()
		l, err := c.RunLogs(ctx, "default", "v", id, since)
		if err != nil {
			t.Fatalf("logs since %d: %v", since, err)
		}
		if l.Next < since {
			t.Fatalf("cursor went back from %d to %d", since, l.Next)
		}
		return l
	}
	var since int64
	poll.Until(t, 30*time.Second, "tick 1 in the log", func() (bool, error) {
		if strings.Contains(stdout.String(), "tick 1\n") {
			return true, nil
		}
		l := read(run.ID, since)
		if l.Done {
			t.Fatalf("run ended before tick 1 was read: %+v", l)
		}
		for _, ch := range l.Chunks {
			stdout.Write(ch.Data)
		}
		since = l.Next
		return strings.Contains(stdout.String(), "tick 1\n"), nil
	})
	first := since
	if st, err := c.RunStatus(ctx, "default", "v", run.ID); err != nil || st.State != messages.RunRunning {
		t.Fatalf("status while it sleeps: %+v %v", st, err)
	}
	out, code := f.avfsCLI("run", "wait", "--vault", "v", run.ID, "--timeout", "60s")
	var waited messages.RunResult
	if code != 0 || json.Unmarshal([]byte(out), &waited) != nil || waited.Run.Envelope == nil {
		t.Fatalf("run wait: exit %d: %s", code, out)
	}
	for {
		l := read(run.ID, since)
		for _, ch := range l.Chunks {
			if ch.Stream == messages.StreamStderr {
				stderr.Write(ch.Data)
			} else {
				stdout.Write(ch.Data)
			}
		}
		since = l.Next
		if l.Done {
			break
		}
	}
	env := waited.Run.Envelope
	if env.Status != messages.StatusCompleted || env.ExitCode == nil || *env.ExitCode != 0 || env.RequestID != run.ID {
		t.Fatalf("envelope: %+v", env)
	}
	if stdout.String() != env.Stdout || stderr.String() != env.Stderr {
		t.Fatalf("log %q / %q, envelope %q / %q", stdout.String(), stderr.String(), env.Stdout, env.Stderr)
	}
	// A cursor stays valid: reading again from the first one gives the
	// same rest of the log.
	again := read(run.ID, first)
	var rest bytes.Buffer
	for _, ch := range again.Chunks {
		if ch.Stream == messages.StreamStdout {
			rest.Write(ch.Data)
		}
	}
	if "tick 1\n"+rest.String() != env.Stdout {
		t.Fatalf("log from cursor %d: %q", first, rest.String())
	}
	// A fresh CLI still finds the run and its envelope.
	out, code = f.avfsCLI("run", "status", "--vault", "v", run.ID)
	var st messages.RunResult
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Run.State != messages.RunDone || st.Run.Envelope == nil || st.Run.Envelope.Stdout != env.Stdout {
		t.Fatalf("run status after the end: exit %d: %s", code, out)
	}

	// A long run with a background child: kill ends the whole group.
	// The command may run in a pid namespace, so its processes are found
	// by their arguments, unique to this test.
	long := start("sleep 3131 & sleep 3132; wait")
	var pids []int
	poll.Until(t, 30*time.Second, "the long run's processes", func() (bool, error) {
		pids = append(sleeping("3131"), sleeping("3132")...)
		return len(pids) >= 2, fmt.Errorf("found %v", pids)
	})
	out, code = f.avfsCLI("run", "kill", "--vault", "v", long.ID)
	var killed messages.RunResult
	if code != 0 || json.Unmarshal([]byte(out), &killed) != nil || killed.Run.State != messages.RunDone ||
		killed.Run.Envelope == nil || killed.Run.Envelope.Status != messages.StatusCanceled {
		t.Fatalf("run kill: exit %d: %s", code, out)
	}
	for _, p := range pids {
		poll.Until(t, 10*time.Second, fmt.Sprintf("process %d of the killed run ends", p), func() (bool, error) { return !alive(p), nil })
	}
	out, code = f.avfsCLI("run", "list", "--vault", "v")
	var list messages.RunListResult
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Runs) != 2 || list.Runs[0].ID != long.ID {
		t.Fatalf("run list: exit %d: %s", code, out)
	}
}

// sleeping lists the live processes running `sleep arg`.
func sleeping(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == "sleep\x00"+arg+"\x00" && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...; comm may hold spaces, so look after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestExecStreamsToATerminalThroughTheFleet: a person running avfs exec
// against a fleet, in a real terminal, sees the first line while the
// command still runs, then the summary.
func TestExecStreamsToATerminalThroughTheFleet(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	if out, code := f.avfsCLI("vault", "create", "v"); code != 0 {
		t.Fatalf("create: %s", out)
	}
	term := terminal.Open(t)
	code := make(chan int, 1)
	go func() {
		code <- cli.Main(context.Background(), []string{"exec", "--nats", f.url, "--vault", "v", "--",
			"sh", "-c", "echo a; sleep 4; echo b"}, strings.NewReader(""), term.TTY, term.TTY, cli.Options{})
	}()
	if s := term.WaitFor("(?m)^a\n"); strings.Contains(s, "b\n") || len(code) > 0 {
		t.Fatalf("a shown only with b or the end:\n%s", s)
	}
	s := term.WaitFor("avfs: completed, exit 0")
	if c := <-code; c != 0 || !strings.HasPrefix(s, "a\nb\navfs: completed, exit 0, ") {
		t.Fatalf("exit %d, terminal:\n%s", c, s)
	}
}

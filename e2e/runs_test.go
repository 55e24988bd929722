package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/cli"
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
	// The command waits for a file that only the output callback
	// creates, once it saw the first line: output delivered with the
	// reply would leave it waiting until its timeout.
	gate := filepath.Join(t.TempDir(), "gate")
	var mu sync.Mutex
	var stdout, stderr bytes.Buffer
	var seqs []int64
	req := messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "v"}
	req.Args, _ = json.Marshal(messages.ExecArgs{Timeout: "30s",
		Shell: "echo first; while [ ! -e " + gate + " ]; do sleep 0.05; done; for i in 1 2 3; do echo line $i; echo warn $i >&2; done"})
	rep, err := c.DoOutput(ctx, req, func(ch messages.OutputChunk) {
		mu.Lock()
		defer mu.Unlock()
		seqs = append(seqs, ch.Seq)
		if ch.Stream == messages.StreamStderr {
			stderr.Write(ch.Data)
			return
		}
		stdout.Write(ch.Data)
		if strings.HasPrefix(stdout.String(), "first\n") {
			os.WriteFile(gate, nil, 0o644)
		}
	})
	if err != nil || rep.Error != nil {
		t.Fatalf("exec: %v %v", err, rep.Error)
	}
	var env messages.Envelope
	if err := json.Unmarshal(rep.Result, &env); err != nil {
		t.Fatal(err)
	}
	if env.Status != messages.StatusCompleted || env.TimedOut {
		t.Fatalf("status %s (timed out %v): the output did not arrive while the command ran", env.Status, env.TimedOut)
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
	gate := filepath.Join(t.TempDir(), "gate")
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
	run := start("echo tick 1; while [ ! -e " + gate + " ]; do sleep 0.05; done; for i in 2 3 4; do echo tick $i; echo oops $i >&2; done")

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
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "tick 1\n") {
		l := read(run.ID, since)
		if l.Done {
			t.Fatalf("run ended before the gate opened: %+v", l)
		}
		for _, ch := range l.Chunks {
			stdout.Write(ch.Data)
		}
		since = l.Next
		if time.Now().After(deadline) {
			t.Fatal("tick 1 never showed in the log")
		}
		time.Sleep(50 * time.Millisecond)
	}
	first := since
	if st, err := c.RunStatus(ctx, "default", "v", run.ID); err != nil || st.State != messages.RunRunning {
		t.Fatalf("status while it waits: %+v %v", st, err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
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
	long := start("echo $$; sleep 300 & echo $!; wait")
	var pids []int
	deadline = time.Now().Add(30 * time.Second)
	for len(pids) < 2 {
		l := read(long.ID, 0)
		var b bytes.Buffer
		for _, ch := range l.Chunks {
			b.Write(ch.Data)
		}
		pids = pids[:0]
		for _, w := range strings.Fields(b.String()) {
			if p, err := strconv.Atoi(w); err == nil {
				pids = append(pids, p)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the long run never printed its pids: %q", b.String())
		}
		if len(pids) < 2 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	out, code = f.avfsCLI("run", "kill", "--vault", "v", long.ID)
	var killed messages.RunResult
	if code != 0 || json.Unmarshal([]byte(out), &killed) != nil || killed.Run.State != messages.RunDone ||
		killed.Run.Envelope == nil || killed.Run.Envelope.Status != messages.StatusCanceled {
		t.Fatalf("run kill: exit %d: %s", code, out)
	}
	for _, p := range pids {
		deadline := time.Now().Add(10 * time.Second)
		for alive(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the killed run is still alive", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	out, code = f.avfsCLI("run", "list", "--vault", "v")
	var list messages.RunListResult
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Runs) != 2 || list.Runs[0].ID != long.ID {
		t.Fatalf("run list: exit %d: %s", code, out)
	}
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
	gate := filepath.Join(t.TempDir(), "gate")
	code := make(chan int, 1)
	go func() {
		code <- cli.Main(context.Background(), []string{"exec", "--nats", f.url, "--vault", "v", "--",
			"sh", "-c", "echo a; while [ ! -e " + gate + " ]; do sleep 0.05; done; echo b"}, strings.NewReader(""), term.TTY, term.TTY, cli.Options{})
	}()
	if s := term.WaitFor("(?m)^a\n"); strings.Contains(s, "b\n") {
		t.Fatalf("b shown before the command printed it:\n%s", s)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := term.WaitFor("avfs: completed, exit 0")
	if c := <-code; c != 0 || !strings.HasPrefix(s, "a\nb\navfs: completed, exit 0, ") {
		t.Fatalf("exit %d, terminal:\n%s", c, s)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/dispatcher"
	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
)

var (
	buildOnce sync.Once
	avfsBin   string
	buildErr  error
)

// binary builds the avfs command once per test run: the failover test
// needs workers it can kill for real.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "avfs-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		avfsBin = filepath.Join(dir, "avfs")
		out, err := exec.Command("go", "build", "-o", avfsBin, "../cmd/avfs").CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf("%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build avfs: %v", buildErr)
	}
	return avfsBin
}

// startWorkerProcess runs `avfs worker` as its own process on home.
func (f *fleet) startWorkerProcess(home, id string, env ...string) *exec.Cmd {
	f.t.Helper()
	cmd, err := f.startWorkerProcessOn(f.url, home, id, env...)
	if err != nil {
		f.t.Fatal(err)
	}
	return cmd
}

// startWorkerProcessOn runs `avfs worker` as its own process on home,
// connected to the NATS server at url, with the fleet's timings; it may
// be called from any goroutine.
func (f *fleet) startWorkerProcessOn(url, home, id string, env ...string) (*exec.Cmd, error) {
	cmd := exec.Command(binary(f.t), "worker", "--nats", url, "--home", home, "--id", id)
	cmd.Stderr = os.Stderr
	if env = append(f.timingEnv(), env...); len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f.t.Cleanup(func() {
		// Gracefully if it still runs, so it unmounts; then clear any
		// mount a killed worker left behind.
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		detachMountsUnder(home)
	})
	return cmd, nil
}

// killWorker kills a worker process started by startWorkerProcess with
// SIGKILL and reaps it. A thread of the worker caught in a request to
// one of its own mounts (one the dead server had already read) keeps the
// process a zombie until that FUSE connection is aborted, as an operator
// would with /sys/fs/fuse/connections: so if it has not gone after 10 s,
// its mounts' connections are aborted.
func killWorker(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGKILL)
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
		return
	case <-time.After(10 * time.Second):
	}
	for i, a := range cmd.Args {
		if a == "--home" && i+1 < len(cmd.Args) {
			t.Logf("worker %d still not reaped 10 s after SIGKILL: aborting its FUSE connections", cmd.Process.Pid)
			abortMountsUnder(cmd.Args[i+1])
		}
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %d not reaped 40 s after SIGKILL", cmd.Process.Pid)
	}
}

// mountsUnder lists the mounts below dir as mountinfo's fields.
func mountsUnder(dir string) [][]string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields)
		}
	}
	return out
}

// abortMountsUnder aborts the FUSE connection of every mount below dir
// (named by the mount's device minor number).
func abortMountsUnder(dir string) {
	for _, fields := range mountsUnder(dir) {
		if _, minor, ok := strings.Cut(fields[2], ":"); ok {
			os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0o200)
		}
	}
}

// detachMountsUnder lazily unmounts every mount below dir.
func detachMountsUnder(dir string) {
	for _, fields := range mountsUnder(dir) {
		syscall.Unmount(fields[4], syscall.MNT_DETACH)
	}
}

func (f *fleet) waitMembers(ids ...string) {
	f.t.Helper()
	js, _ := jetstream.New(f.conn())
	poll.Until(f.t, 30*time.Second, fmt.Sprintf("workers %v joined", ids), func() (bool, error) {
		st, err := dispatcher.Status(context.Background(), js)
		if err != nil {
			return false, err
		}
		found := 0
		for _, w := range st.Workers {
			for _, id := range ids {
				if w.ID == id {
					found++
				}
			}
		}
		return found == len(ids), fmt.Errorf("members %+v", st.Workers)
	})
}

// runningExecs asks a worker's status endpoint how many requests it runs.
func (f *fleet) runningExecs(id string) int {
	m, err := f.conn().Request(messages.SubjectRoot+".worker."+id+".status", nil, time.Second)
	if err != nil {
		return -1
	}
	var mem messages.Member
	json.Unmarshal(m.Data, &mem)
	return mem.RunningExecs
}

func TestWorkerKilledMidExec(t *testing.T) {
	f := startFleet(t)
	home := t.TempDir() // shared by both workers: either can serve any vault
	procs := map[string]*exec.Cmd{"wa": f.startWorkerProcess(home, "wa"), "wb": f.startWorkerProcess(home, "wb")}
	f.waitMembers("wa", "wb")
	c := f.client()
	ctx := context.Background()
	if err := c.Call(ctx, "default", "v", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctx, "default", "v", messages.OpWrite, messages.WriteArgs{Path: "/a.txt", Content: []byte("acked")}, nil); err != nil {
		t.Fatal(err)
	}
	type result struct {
		env messages.Envelope
		err error
	}
	done := make(chan result, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 120*time.Second)
		defer cancel()
		env, err := c.Exec(cctx, "default", "v", messages.ExecArgs{Shell: "sleep 4; echo done >> done.txt", Timeout: "60s"})
		done <- result{env, err}
	}()
	// Find the owner while it runs the command, then kill it for real.
	var owner string
	poll.Until(t, 30*time.Second, "a worker runs the exec", func() (bool, error) {
		for id := range procs {
			if f.runningExecs(id) > 0 {
				owner = id
			}
		}
		return owner != "", nil
	})
	killed := time.Now()
	killWorker(t, procs[owner])

	var cat messages.CatResult
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.Call(cctx, "default", "v", messages.OpCat, messages.PathArgs{Path: "/a.txt"}, &cat); err != nil {
		t.Fatalf("the vault was not served again after its worker died: %v", err)
	}
	if took := time.Since(killed); took > 30*time.Second {
		t.Fatalf("served again after %v, want within 30s", took)
	}
	if *cat.Content != "acked" {
		t.Fatalf("acknowledged write lost: %q", *cat.Content)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the killed exec's request never ended: %v", r.err)
	}
	if r.env.Worker == owner || r.env.Status != messages.StatusCompleted {
		t.Fatalf("killed exec ended as %s on %s (killed %s)", r.env.Status, r.env.Worker, owner)
	}
	var out messages.CatResult
	if err := c.Call(ctx, "default", "v", messages.OpCat, messages.PathArgs{Path: "/done.txt"}, &out); err != nil {
		t.Fatal(err)
	}
	if *out.Content != "done\n" {
		t.Fatalf("the re-run exec left %q, want exactly one completed run", *out.Content)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/internal/poll"
)

// keeperEnv is a home whose local execs go to the exec keeper (this test
// binary re-executed as `avfs keeper run`, see TestMain). The keeper is
// stopped, and its mounts gone, when the test ends.
func keeperEnv(t *testing.T, idle string) *env {
	t.Helper()
	e := newEnv(t)
	t.Setenv("AVFS_EXEC_KEEPER", "true")
	t.Setenv("AVFS_EXEC_KEEPER_IDLE", idle)
	t.Cleanup(func() {
		if err := stopKeeper(context.Background(), e.home); err != nil {
			t.Errorf("stop keeper: %v", err)
		}
		// A keeper killed by the test leaves its mount behind.
		for _, m := range mountsUnder(e.home) {
			syscall.Unmount(m, syscall.MNT_DETACH)
		}
		t.Logf("keeper.log:\n%s", readFile(filepath.Join(e.home, keeperLog)))
	})
	return e
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

// mountsUnder lists the mount points under dir.
func mountsUnder(dir string) []string {
	var out []string
	for _, line := range strings.Split(readFile("/proc/self/mounts"), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			out = append(out, f[1])
		}
	}
	return out
}

// keeperPIDs are the processes running `keeper run` for home.
func keeperPIDs(home string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "keeper\x00run\x00--home\x00"+home+"\x00") {
			out = append(out, d.Name())
		}
	}
	return out
}

func (e *env) keeperStatus() keeperStatus {
	e.t.Helper()
	out, errs, code := e.run("", "keeper", "status", "--json")
	if code != 0 {
		e.t.Fatalf("keeper status: exit %d\n%s%s", code, out, errs)
	}
	var st keeperStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		e.t.Fatalf("keeper status: %v\n%s", err, out)
	}
	return st
}

// execEnv runs a local exec that must complete and returns its envelope.
func (e *env) execEnv(args ...string) map[string]any {
	e.t.Helper()
	env := e.ok(append([]string{"exec", "--json"}, args...)...)
	if env["status"] != "completed" {
		e.t.Fatalf("exec %v: status %v, want completed\n%v", args, env["status"], env)
	}
	return env
}

func TestKeeperServesLocalExecs(t *testing.T) {
	e := keeperEnv(t, "1m")
	e.ok("vault", "create", "w", "--json")
	e.ok("vault", "use", "w", "--json")

	env := e.execEnv("--", "sh", "-c", "echo made > f.txt; echo out")
	if env["stdout"] != "out\n" || env["worker"] != "local" {
		t.Fatalf("envelope stdout %q worker %v, want \"out\\n\" local", env["stdout"], env["worker"])
	}
	added := env["changes"].(map[string]any)["added"].([]any)
	if len(added) != 1 || added[0].(map[string]any)["path"] != "/f.txt" {
		t.Fatalf("changes.added = %v, want /f.txt", added)
	}
	st := e.keeperStatus()
	if !st.Running || !st.Current || st.Requests != 1 {
		t.Fatalf("keeper status %+v: want running, current, 1 request", st)
	}
	if fi, err := os.Stat(st.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v, want 0600", st.Socket, err, fi.Mode().Perm())
	}
	if m := mountsUnder(e.home); len(m) != 1 {
		t.Fatalf("mounts under the home between execs: %v, want the vault's one (kept)", m)
	}

	// Another process (this one, in-process) changes the vault: the
	// kept mount shows it at the next exec.
	if _, errs, code := e.run("two\n", "write", "/f.txt", "--json"); code != 0 {
		t.Fatalf("write: %s", errs)
	}
	if env := e.execEnv("--", "cat", "f.txt"); env["stdout"] != "two\n" {
		t.Fatalf("cat after a write from another process: %q, want \"two\\n\"", env["stdout"])
	}
	// Deleted and created again elsewhere: the keeper mounts the new one.
	e.ok("vault", "delete", "w", "--yes", "--json")
	poll.Until(t, 10*time.Second, "keeper unmounts the deleted vault", func() (bool, error) {
		return len(mountsUnder(e.home)) == 0, nil
	})
	e.ok("vault", "create", "w", "--json")
	if env := e.execEnv("--", "ls"); env["stdout"] != "" {
		t.Fatalf("ls in a vault made again: %q, want nothing (the old vault's files shown)", env["stdout"])
	}
	// Refused by the policy: the same envelope as in-process, and audited.
	out, _, code := e.run("", "exec", "--json", "--", "curl", "http://example.invalid/")
	if code == 0 || !strings.Contains(out, `"approval_required"`) && !strings.Contains(out, `"denied"`) {
		t.Fatalf("curl through the keeper: exit %d\n%s", code, out)
	}
	var held map[string]any
	json.Unmarshal([]byte(out), &held)
	if id, _ := held["approval_id"].(string); id != "" {
		before := e.keeperStatus().Requests
		e.run("", "approval", "grant", id, "--json")
		if after := e.keeperStatus().Requests; after != before+1 {
			t.Fatalf("approval grant: keeper requests %d → %d, want the grant run there", before, after)
		}
	}
	audit := e.ok("audit", "--json")
	if b, _ := json.Marshal(audit); !bytes.Contains(b, []byte("exec.run")) {
		t.Fatalf("audit has no exec.run event: %s", b)
	}
	if st2 := e.keeperStatus(); st2.PID != st.PID {
		t.Fatalf("keeper pid %d after more execs, want the same %d", st2.PID, st.PID)
	}

	// Killed: the next exec finds the dead socket (and mount) and starts
	// another keeper.
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "killed keeper gone", func() (bool, error) { return syscall.Kill(st.PID, 0) != nil, nil })
	if env := e.execEnv("--", "true"); env["exit_code"] != float64(0) {
		t.Fatalf("exec after the keeper was killed: %v", env)
	}
	if st3 := e.keeperStatus(); !st3.Running || st3.PID == st.PID {
		t.Fatalf("keeper after a kill: %+v, want a new one", st3)
	}
}

func TestKeeperRacingCLIsStartOne(t *testing.T) {
	e := keeperEnv(t, "1m")
	e.ok("vault", "create", "w", "--json")
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errs, code := e.run("", "exec", "--vault", "w", "--checkpoint", "never", "--json", "--", "true")
			if code != 0 {
				t.Errorf("exec %d: exit %d\n%s%s", i, code, out, errs)
			}
			outs[i] = out
		}()
	}
	wg.Wait()
	if p := keeperPIDs(e.home); len(p) != 1 {
		t.Fatalf("keeper processes after 4 racing execs: %v, want one", p)
	}
	if st := e.keeperStatus(); st.Requests != 4 {
		t.Fatalf("keeper served %d requests, want 4 (one ran in-process?)", st.Requests)
	}
}

func TestKeeperReplacedWhenConfigChanges(t *testing.T) {
	e := keeperEnv(t, "1m")
	e.ok("vault", "create", "w", "--json")
	e.execEnv("--vault", "w", "--", "true")
	old := e.keeperStatus()
	if err := os.WriteFile(filepath.Join(e.home, "avfs.yaml"), []byte("exec:\n  timeout: 7s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := e.keeperStatus(); st.Current {
		t.Fatalf("keeper status after a config change: current, want not current")
	}
	// The new configuration applies: a command over 7 s times out.
	out, _, code := e.run("", "exec", "--vault", "w", "--json", "--", "sleep", "30")
	var env map[string]any
	json.Unmarshal([]byte(out), &env)
	if code != 124 || env["timed_out"] != true {
		t.Fatalf("sleep 30 with exec.timeout 7s: timed_out %v, want true", env["timed_out"])
	}
	st := e.keeperStatus()
	if !st.Running || !st.Current || st.PID == old.PID {
		t.Fatalf("keeper after a config change: %+v, want a new current one (old pid %d)", st, old.PID)
	}
	if syscall.Kill(old.PID, 0) == nil {
		t.Fatalf("the replaced keeper (pid %d) still runs", old.PID)
	}
}

func TestKeeperExitsWhenIdle(t *testing.T) {
	e := keeperEnv(t, "300ms")
	e.ok("vault", "create", "w", "--json")
	e.execEnv("--vault", "w", "--", "true")
	pid := e.keeperStatus().PID
	poll.Until(t, 20*time.Second, "idle keeper exits and unmounts", func() (bool, error) {
		return syscall.Kill(pid, 0) != nil && len(mountsUnder(e.home)) == 0, nil
	})
	if _, err := os.Stat(filepath.Join(e.home, keeperSock)); !os.IsNotExist(err) {
		t.Fatalf("socket after the keeper left: %v, want removed", err)
	}
	if log := readFile(filepath.Join(e.home, keeperLog)); !strings.Contains(log, "reason=idle") {
		t.Fatalf("keeper.log does not say it stopped for being idle:\n%s", log)
	}
}

func TestKeeperOff(t *testing.T) {
	e := keeperEnv(t, "1m")
	t.Setenv("AVFS_EXEC_KEEPER", "false")
	e.ok("vault", "create", "w", "--json")
	e.execEnv("--vault", "w", "--", "true")
	if _, err := os.Stat(filepath.Join(e.home, keeperSock)); !os.IsNotExist(err) {
		t.Fatalf("exec with exec.keeper false made %s (%v)", keeperSock, err)
	}
	if m := mountsUnder(e.home); len(m) != 0 {
		t.Fatalf("mounts after a keeper-less exec: %v, want none", m)
	}
}

// TestKeeperInterrupted: an interrupted CLI (its context ends, as on
// Ctrl-C) gets the canceled run's envelope from the keeper, as in-process.
func TestKeeperInterrupted(t *testing.T) {
	e := keeperEnv(t, "1m")
	e.ok("vault", "create", "w", "--json")
	e.execEnv("--vault", "w", "--", "true") // the keeper runs
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	start := time.Now()
	Main(ctx, []string{"exec", "--vault", "w", "--json", "--", "sleep", "60"}, strings.NewReader(""), &out, &errb, Options{})
	var env map[string]any
	if err := json.Unmarshal(out.Bytes(), &env); err != nil || env["status"] != "canceled" {
		t.Fatalf("interrupted exec: %v, status %v, want the canceled envelope\n%s%s", err, env["status"], out.String(), errb.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("interrupted exec returned after %s, want soon after the interrupt", d)
	}
	if st := e.keeperStatus(); st.Running_ != 0 {
		t.Fatalf("keeper still runs %d commands after the interrupt", st.Running_)
	}
}

// TestServeTakesOverFromKeeper: avfs serve stops the home's keeper before
// it mounts anything, and local execs then go to the server (no keeper is
// started while it runs).
func TestServeTakesOverFromKeeper(t *testing.T) {
	e := keeperEnv(t, "1m")
	e.ok("vault", "create", "w", "--json")
	e.execEnv("--vault", "w", "--", "true")
	pid := e.keeperStatus().PID
	startServe(t, e, "w-serve")
	if syscall.Kill(pid, 0) == nil && !zombie(pid) {
		t.Fatalf("keeper (pid %d) still runs after avfs serve started", pid)
	}
	env := e.execEnv("--vault", "w", "--", "true")
	if env["worker"] != "w-serve" {
		t.Fatalf("exec with serve running: worker %v, want w-serve", env["worker"])
	}
	if p := keeperPIDs(e.home); len(p) != 0 {
		t.Fatalf("keeper processes while serve runs: %v, want none", p)
	}
}

// The keeper's fingerprint prints the configuration as Go syntax, which
// is the same in every process only while the configuration holds no
// pointers (their addresses would be printed): a new pointer field would
// make every exec replace the keeper.
func TestKeeperFingerprintOfConfigIsStable(t *testing.T) {
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Pointer, reflect.Func, reflect.Chan, reflect.UnsafePointer:
			t.Errorf("config field %s is a %s: the keeper's fingerprint would differ between processes", path, ty.Kind())
		case reflect.Struct:
			for i := range ty.NumField() {
				walk(ty.Field(i).Type, path+"."+ty.Field(i).Name)
			}
		case reflect.Slice, reflect.Array, reflect.Map:
			walk(ty.Elem(), path+"[]")
		}
	}
	walk(reflect.TypeFor[config.Config](), "Config")
	a := config.Config{Home: "/h"}
	a.Policy.Rules = []map[string]any{{"match": "x y", "n": 2}}
	b := config.Config{Home: "/h"}
	b.Policy.Rules = []map[string]any{{"n": 2, "match": "x y"}}
	if keeperFingerprint(&a) != keeperFingerprint(&b) {
		t.Error("equal configurations, different fingerprints")
	}
	b.Policy.Rules[0]["match"] = "x"
	if keeperFingerprint(&a) == keeperFingerprint(&b) {
		t.Error("different configurations, equal fingerprints")
	}
}

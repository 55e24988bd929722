package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// startServe runs `avfs serve --home home ARGS` and returns the process
// and what it printed when ready.
func startServe(t *testing.T, home string, args ...string) (*exec.Cmd, struct{ URL, Worker string }) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"serve", "--home", home, "--json"}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		detachMountsUnder(home)
	})
	var started struct{ URL, Worker string }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || json.Unmarshal([]byte(line), &started) != nil || started.URL == "" || started.Worker == "" {
		t.Fatalf("avfs serve printed %q (%v)", line, err)
	}
	return cmd, started
}

// TestKilledServeTakesItsVaultsBackAtOnce: `avfs serve` without --id
// keeps its worker id in the home, so after kill -9 and a restart it is
// the same worker, still the owner of its vaults: their requests are
// served at once, not after the dead process's heartbeat expires (10 s).
func TestKilledServeTakesItsVaultsBackAtOnce(t *testing.T) {
	home := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0]) // the same URL after the restart
	serve, first := startServe(t, home, "--listen", listen)
	kept, err := os.ReadFile(filepath.Join(home, "worker-id"))
	if err != nil || strings.TrimSpace(string(kept)) != first.Worker {
		t.Fatalf("worker-id holds %q (%v), serve runs as %q", kept, err, first.Worker)
	}
	if st, _ := os.Stat(filepath.Join(home, "worker-id")); st == nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("worker-id mode: %v", st)
	}
	call := func(url string, timeout time.Duration, op messages.Op, args, out any) error {
		nc, err := nats.Connect(url)
		if err != nil {
			return err
		}
		defer nc.Close()
		c, err := client.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return c.Call(ctx, "default", "v", op, args, out)
	}
	if err := call(first.URL, time.Minute, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(first.URL, time.Minute, messages.OpWrite, messages.WriteArgs{Path: "/f", Content: []byte("kept")}, nil); err != nil {
		t.Fatal(err)
	}
	serve.Process.Kill()
	serve.Wait()

	t0 := time.Now()
	_, second := startServe(t, home, "--listen", listen)
	t.Logf("restarted in %s", time.Since(t0))
	if second.Worker != first.Worker {
		t.Fatalf("restarted serve is worker %q, was %q", second.Worker, first.Worker)
	}
	// A new worker id had to wait out the old one's heartbeat (10 s TTL)
	// before the vault was reassigned; the same id owns it still. Five
	// seconds is far from both.
	var cat messages.CatResult
	if err := call(second.URL, 5*time.Second, messages.OpCat, messages.PathArgs{Path: "/f"}, &cat); err != nil {
		t.Fatalf("first request after the restart: %v", err)
	}
	t.Logf("first request answered %s after the restart began", time.Since(t0))
	if cat.Content == nil || *cat.Content != "kept" {
		t.Fatalf("after restart: %+v", cat)
	}
}

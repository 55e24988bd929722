package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// TestServePlusWorkerServeManyAgents is the fleet on one machine as an
// operator starts it: `avfs serve` (embedded NATS, dispatcher, worker) and
// a second `avfs worker` with its own home, both real processes. Sixteen
// agents at once each create a vault, write, run a command and
// checkpoint; the vaults are spread over both workers, and the CLI on
// serve's home lists all of them and shows both workers.
func TestServePlusWorkerServeManyAgents(t *testing.T) {
	home := t.TempDir()
	_, started := startServe(t, home, "--id", "main")
	f := &fleet{t: t, url: started.URL}
	f.startWorkerProcess(t.TempDir(), "second")
	f.waitMembers("main", "second")

	nc, err := nats.Connect(started.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const agents = 16
	envs := make([]messages.Envelope, agents)
	errs := make([]error, agents)
	var wg sync.WaitGroup
	for i := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			name := fmt.Sprintf("agent%02d", i)
			steps := []func() error{
				func() error {
					return c.Call(ctx, "default", name, messages.OpVaultCreate, messages.VaultCreateArgs{}, nil)
				},
				func() error {
					return c.Call(ctx, "default", name, messages.OpWrite, messages.WriteArgs{Path: "/task.txt", Content: []byte(name)}, nil)
				},
				func() (err error) {
					envs[i], err = c.Exec(ctx, "default", name, messages.ExecArgs{Shell: "cat task.txt; echo done > out.txt"})
					return err
				},
				func() error {
					return c.Call(ctx, "default", name, messages.OpCheckpointSave, messages.CheckpointArgs{Name: "after"}, nil)
				},
			}
			for _, step := range steps {
				if errs[i] = step(); errs[i] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	byWorker := map[string]int{}
	for i := range agents {
		if errs[i] != nil {
			t.Fatalf("agent %d: %v", i, errs[i])
		}
		if e := envs[i]; e.Status != messages.StatusCompleted || e.Stdout != fmt.Sprintf("agent%02d", i) || len(e.Changes.Added) != 1 {
			t.Fatalf("agent %d: %+v", i, e)
		}
		byWorker[envs[i].Worker]++
	}
	if byWorker["main"] == 0 || byWorker["second"] == 0 {
		t.Fatalf("agents' vaults by worker: %v, want both serve's and the second worker", byWorker)
	}

	// The CLI on serve's home talks to it: every agent's vault is listed,
	// whichever worker's store holds it.
	out, err := exec.Command(binary(t), "vault", "list", "--home", home, "--json").Output()
	if err != nil {
		t.Fatalf("avfs vault list: %v", err)
	}
	for i := range agents {
		if name := fmt.Sprintf("%q", fmt.Sprintf("agent%02d", i)); !strings.Contains(string(out), name) {
			t.Fatalf("vault list misses %s: %s", name, out)
		}
	}
	out, err = exec.Command(binary(t), "fleet", "status", "--home", home, "--json").Output()
	if err != nil {
		t.Fatalf("avfs fleet status: %v", err)
	}
	var st messages.FleetStatus
	if err := json.Unmarshal(out, &st); err != nil || len(st.Workers) != 2 || st.Dispatchers != 1 {
		t.Fatalf("fleet status: %s (%v), want 2 workers and 1 dispatcher", out, err)
	}
}

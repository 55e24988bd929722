package node_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/node"
	"github.com/avfs/avfs/vault"
)

func call(t *testing.T, n *node.Node, op messages.Op, v string, args, out any) {
	t.Helper()
	b, _ := json.Marshal(args)
	rep := n.Handle(context.Background(), messages.Request{Op: op, Vault: v, Args: b})
	if rep.Error != nil {
		t.Fatalf("%s: %v", op, rep.Error)
	}
	if out != nil {
		if err := json.Unmarshal(rep.Result, out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNodeServesInProcess: a node opened on a home serves requests,
// exec included (the runner is registered), and reopening the home finds
// what the first node wrote.
func TestNodeServesInProcess(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	n, err := node.Open(ctx, node.Options{Config: &config.Config{Home: home}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	call(t, n, messages.OpVaultCreate, "v", messages.VaultCreateArgs{}, nil)
	var env messages.Envelope
	call(t, n, messages.OpExec, "v", messages.ExecArgs{Shell: "echo hi > out.txt"}, &env)
	if env.Status != messages.StatusCompleted || env.Worker != "local" {
		t.Fatalf("exec: status %q worker %q, want completed from local", env.Status, env.Worker)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, err := node.Open(ctx, node.Options{Config: &config.Config{Home: home}, Worker: "w9"})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	var cat messages.CatResult
	call(t, n2, messages.OpCat, "v", messages.PathArgs{Path: "/out.txt"}, &cat)
	if cat.Content == nil || *cat.Content != "hi\n" {
		t.Fatalf("cat after reopening: got %v, want hi", cat.Content)
	}
}

// TestNodeLeavesAHandedInStoreOpen: Close closes only what Open opened.
func TestNodeLeavesAHandedInStoreOpen(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	st, err := vault.Open(ctx, filepath.Join(home, "store.db"), vault.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := node.Open(ctx, node.Options{Config: &config.Config{Home: home}, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	call(t, n, messages.OpVaultCreate, "v", messages.VaultCreateArgs{}, nil)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Vault("default", "v").Info(ctx); err != nil {
		t.Fatalf("the handed-in store after Close: %v", err)
	}
}

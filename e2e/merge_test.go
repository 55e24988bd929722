package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// TestMergeThroughFleet merges forks back through a fleet of two workers
// with separate stores: a fork on its source's worker merges (text
// merged line by line, the merge pushed with its checkpoint), a conflict
// applies nothing, `attempts run --merge best` merges the winner in one
// call, and a fork another worker owns is pushed by its owner and merged
// from a pulled copy.
func TestMergeThroughFleet(t *testing.T) {
	f := startFleet(t)
	f.addWorker("w1")
	f.addWorker("w2")
	c := f.client()
	ctx := context.Background()
	js, _ := jetstream.New(f.conn())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(v, p, content string) {
		t.Helper()
		must(c.Call(ctx, "default", v, messages.OpWrite, messages.WriteArgs{Path: p, Content: []byte(content)}, nil))
	}
	cat := func(v, p string) string {
		t.Helper()
		var r messages.CatResult
		must(c.Call(ctx, "default", v, messages.OpCat, messages.PathArgs{Path: p}, &r))
		return *r.Content
	}
	must(c.Call(ctx, "default", "base", messages.OpVaultCreate, messages.VaultCreateArgs{}, nil))
	write("base", "/a.txt", "1\n2\n3\n4\n5\n")
	write("base", "/b.txt", "b\n")
	var fr messages.ForkResult
	must(c.Call(ctx, "default", "base", messages.OpVaultFork, messages.VaultForkArgs{Target: "f1"}, &fr))
	write("f1", "/a.txt", "1\n2\n3\n4\nfive\n")
	write("f1", "/new.txt", "new")
	write("base", "/a.txt", "one\n2\n3\n4\n5\n")

	var mr messages.MergeResult
	must(c.Call(ctx, "default", "base", messages.OpVaultMerge, messages.VaultMergeArgs{Fork: "f1"}, &mr))
	if !mr.Applied || mr.Checkpoint == "" || len(mr.Merged) != 1 || len(mr.Changes.Added) != 1 {
		t.Fatalf("merge: %+v", mr)
	}
	if got := cat("base", "/a.txt"); got != "one\n2\n3\n4\nfive\n" {
		t.Fatalf("merged /a.txt: %q", got)
	}
	if got := cat("base", "/new.txt"); got != "new" {
		t.Fatalf("/new.txt: %q", got)
	}
	waitPushed(t, js, "default", "base", mr.Checkpoint) // the merge travels like a checkpoint

	// A conflict: nothing applied, the conflicts in the error's details.
	write("base", "/b.txt", "ours\n")
	write("f1", "/b.txt", "theirs\n")
	write("f1", "/c.txt", "c")
	err := c.Call(ctx, "default", "base", messages.OpVaultMerge, messages.VaultMergeArgs{Fork: "f1"}, nil)
	var me *messages.Error
	if !errors.As(err, &me) || me.Code != messages.CodeMergeConflict || fmt.Sprint(me.Details["conflicts"]) == "[]" {
		t.Fatalf("conflicting merge: %v", err)
	}
	var st messages.Entry
	if err := c.Call(ctx, "default", "base", messages.OpStat, messages.PathArgs{Path: "/c.txt"}, &st); err == nil {
		t.Fatal("a merge with a conflict applied /c.txt")
	}

	// Parallel attempts, the winner merged in the same call.
	cmds := []messages.ExecArgs{{Shell: "exit 1"}, {Shell: "echo won > won.txt"}}
	res, err := c.RunAttempts(ctx, "default", client.Attempts{From: "base", Commands: cmds, Keep: "none", Merge: "best"})
	if err != nil || res.Merge == nil || !res.Merge.Applied || res.MergeError != nil {
		t.Fatalf("attempts --merge best: %+v, %v", res, err)
	}
	if got := cat("base", "/won.txt"); got != "won\n" {
		t.Fatalf("the winner's file in base: %q", got)
	}

	// A fork on the other worker: its owner pushes its current state
	// (a write since the fork included, which no push had carried yet)
	// and the base's owner merges from a copy it pulls.
	var info messages.VaultResult
	must(c.Call(ctx, "default", "base", messages.OpVaultInfo, nil, &info))
	other := map[string]string{"w1": "w2", "w2": "w1"}[info.Vault.Worker]
	away := ""
	for i := 0; away == ""; i++ {
		if i == 16 {
			t.Fatalf("16 spread forks, none on %s", other)
		}
		name := fmt.Sprintf("away%02d", i)
		must(c.Call(ctx, "default", "base", messages.OpVaultFork, messages.VaultForkArgs{Target: name, Placement: messages.PlacementSpread}, &fr))
		if fr.Vault.Worker == other {
			away = name
		}
	}
	write(away, "/away.txt", "from "+other)
	mr = messages.MergeResult{}
	must(c.Call(ctx, "default", "base", messages.OpVaultMerge, messages.VaultMergeArgs{Fork: away}, &mr))
	if !mr.Applied || mr.Fork != away || len(mr.Changes.Added) != 1 || mr.Changes.Added[0].Path != "/away.txt" {
		t.Fatalf("merge of a fork on another worker: %+v", mr)
	}
	if got := cat("base", "/away.txt"); got != "from "+other {
		t.Fatalf("/away.txt merged from %s: %q", other, got)
	}
	// The copy the merge pulled is gone; the fork is still served by its owner.
	var list messages.VaultListResult
	must(c.Call(ctx, "default", "", messages.OpVaultList, nil, &list))
	for _, v := range list.Vaults {
		if strings.HasPrefix(v.Name, "merge-") {
			t.Fatalf("the merge left its copy %s behind", v.Name)
		}
	}
	must(c.Call(ctx, "default", away, messages.OpVaultInfo, nil, &info))
	if info.Vault.Worker != other {
		t.Fatalf("fork %s moved to %s, want it on %s", away, info.Vault.Worker, other)
	}
	// Attempts spread across workers merge their winner too.
	res, err = c.RunAttempts(ctx, "default", client.Attempts{From: "base", Commands: []messages.ExecArgs{{Shell: "echo spread > spread.txt"}, {Shell: "echo spread > spread.txt"}}, Keep: "none", Merge: "best", Placement: messages.PlacementSpread})
	if err != nil || res.Merge == nil || !res.Merge.Applied {
		t.Fatalf("spread attempts --merge best: %+v, %v", res, err)
	}
	if got := cat("base", "/spread.txt"); got != "spread\n" {
		t.Fatalf("the spread winner's file in base: %q", got)
	}
}
